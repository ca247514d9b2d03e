"""Results of the profilers (``lotus stalls``, ``lotus sensitivity``) for reports: the JSON they leave in
their output directory, as DataFrames and figures (DataFrame in, matplotlib Figure out; Agg)."""

from __future__ import annotations

PROFILE_FILES = {"tune": "tune.json", "sensitivity": "sensitivity.json", "stalls": "stalls.json"}


def find_profiles(data_dir) -> dict[str, dict]:
    """The profilers' results found in ``data_dir`` (``{"sensitivity": doc, "stalls": doc}``)."""
    import json
    from pathlib import Path

    out = {}
    for kind, name in PROFILE_FILES.items():
        p = Path(data_dir) / name
        if p.is_file():
            try:
                out[kind] = json.loads(p.read_text())
            except ValueError:
                continue
    return out


def sensitivity_frame(matrix: list[dict]):
    """The sensitivity matrix (``Profile.to_dict()["matrix"]``) as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(matrix, columns=["cpus", "cache_gb", "samples_per_s", "measured", "predicted_samples_per_s",
                                         "bottleneck", "probe"])


def sensitivity_heatmap(df, *, demand: dict | None = None, title: str = ""):
    """samples/s over CPUs (x) x page cache GB (y); measured points are boxed, the demand point starred."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    if df.empty:
        ax.text(0.5, 0.5, "no points", ha="center", va="center", transform=ax.transAxes)
        return fig
    cpus = sorted(df["cpus"].unique())
    caches = sorted(df["cache_gb"].unique())
    grid = np.full((len(caches), len(cpus)), np.nan)
    for r in df.itertuples():
        if r.samples_per_s is not None and r.samples_per_s == r.samples_per_s:
            grid[caches.index(r.cache_gb), cpus.index(r.cpus)] = r.samples_per_s
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label="samples/s")
    ax.set_xticks(range(len(cpus)), [str(c) for c in cpus])
    ax.set_yticks(range(len(caches)), [f"{g:g}" for g in caches])
    ax.set_xlabel("CPUs")
    ax.set_ylabel("page cache (GB)")
    for r in df.itertuples():
        x, y = cpus.index(r.cpus), caches.index(r.cache_gb)
        if r.samples_per_s == r.samples_per_s and r.samples_per_s is not None:
            ax.text(x, y, f"{r.samples_per_s:,.0f}", ha="center", va="center", fontsize=8,
                    color="white" if r.samples_per_s < np.nanmax(grid) * 0.6 else "black")
        if r.measured:
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, lw=2, ec="red"))
    if demand:
        ax.plot(cpus.index(demand["cpus"]), caches.index(demand["cache_gb"]), marker="*", ms=18, mfc="none",
                mec="orange", mew=2)
    ax.set_title(title or "throughput by CPUs and page cache (boxed: measured; star: demand)")
    return fig
