"""Figures of the model (matplotlib ``Figure`` objects, Agg; no pyplot)."""

from __future__ import annotations

_STYLE = {"lru": ("LRU (page cache)", "tab:blue", "o"), "static": ("static (MinIO/CoorDL)", "tab:orange", "s")}


def cache_figure(df, *, title: str = ""):
    """Hit rate and predicted samples/s against cache size (% of the dataset), one line per policy.

    ``df``: rows with ``policy, cache_frac, hit_rate`` and optionally ``samples_per_s`` (e.g. the steady
    hit rates with :func:`lotus.model.tables.cache_throughput`); per-epoch rows are averaged.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax_hit, ax_rate = fig.subplots(1, 2)
    have_rate = "samples_per_s" in df and df["samples_per_s"].notna().any()
    for policy, g in df.groupby("policy", sort=True):
        label, color, marker = _STYLE.get(str(policy), (str(policy), None, "x"))
        cols = ["hit_rate", "samples_per_s"] if have_rate else ["hit_rate"]
        g = g.assign(**{c: g[c].astype("float64") for c in cols}).groupby("cache_frac", sort=True)[cols].mean()
        pct = g.index.to_numpy() * 100
        ax_hit.plot(pct, g["hit_rate"].to_numpy() * 100, marker=marker, ms=3, color=color, label=label)
        if have_rate:
            ax_rate.plot(pct, g["samples_per_s"].to_numpy(), marker=marker, ms=3, color=color, label=label)
    ax_hit.set(xlabel="cache size (% of the dataset)", ylabel="hit rate (%)", xlim=(0, 100), ylim=(0, 101),
               title="hit rate")
    ax_hit.grid(alpha=0.3)
    ax_hit.legend(loc="upper left", fontsize=8)
    ax_rate.set(xlabel="cache size (% of the dataset)", ylabel="samples/s", xlim=(0, 100), title="predicted samples/s")
    ax_rate.grid(alpha=0.3)
    if have_rate:
        ax_rate.legend(loc="lower right", fontsize=8)
        ax_rate.set_ylim(bottom=0)
    else:
        ax_rate.text(0.5, 0.5, "throughput unknown:\nthe cold read cost was not measured", ha="center",
                     va="center", transform=ax_rate.transAxes, color="0.4")
    if title:
        fig.suptitle(title)
    return fig


__all__ = ["cache_figure"]
