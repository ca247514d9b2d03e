"""Figures: each takes a long-form DataFrame (see :mod:`lotus.analysis.plotdata`) and returns a
matplotlib :class:`~matplotlib.figure.Figure`. No pyplot, no global state, no window: figures are
rendered with Agg when saved (:func:`save_figure`, PNG and SVG).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lotus.analysis._mpl_compat import fast_best

WAIT_LINE_MS = 500.0
_COLORS = {"preprocessing": "#4C72B0", "wait": "#C44E52", "step": "#55A868", "failed": "#222222"}


def _figure(width: float = 8.0, height: float = 4.5):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def preprocessing_box(df):
    """Box plot of batch preprocessing time (ms) per config. ``df``: ``config, prep_ms``."""
    configs = list(dict.fromkeys(df["config"]))
    fig, ax = _figure(max(5.0, 1.2 * len(configs) + 2))
    data = [df.loc[df["config"] == c, "prep_ms"].dropna().to_numpy() for c in configs]
    if not any(len(d) for d in data):
        _empty(ax, "no batch preprocessing times")
        return fig
    ax.boxplot(data, tick_labels=configs, showfliers=True)
    ax.set_ylabel("batch preprocessing time (ms)")
    ax.set_xlabel("config")
    ax.set_title("Batch preprocessing time per config")
    ax.grid(axis="y", alpha=0.3)
    return fig


def op_distributions(df):
    """Per-op time distributions (ms per call, log scale), one box per (op, config). ``df``: ``config, op, ms``."""
    configs = list(dict.fromkeys(df["config"]))
    ops = list(dict.fromkeys(df["op"]))
    fig, ax = _figure(min(14.0, max(6.0, 0.6 * len(ops) * max(1, len(configs)) + 2)), 5.0)
    if not ops:
        _empty(ax, "no op events")
        return fig
    width = 0.8 / max(1, len(configs))
    for k, cfg in enumerate(configs):
        data, pos = [], []
        for i, op in enumerate(ops):
            d = df.loc[(df["config"] == cfg) & (df["op"] == op), "ms"].to_numpy()
            d = d[d > 0]
            if d.size:
                data.append(d)
                pos.append(i - 0.4 + width * (k + 0.5))
        if data:
            bp = ax.boxplot(data, positions=pos, widths=width * 0.9, patch_artist=True, showfliers=False,
                            manage_ticks=False)
            color = f"C{k % 10}"
            for box in bp["boxes"]:
                box.set_facecolor(color)
                box.set_alpha(0.6)
                box.set_label(cfg)
    ax.set_yscale("log")
    ax.set_xticks(range(len(ops)), ops, rotation=30, ha="right")
    ax.set_ylabel("time per call (ms, log scale)")
    ax.set_title("Per-op time (load, transforms: per sample; collate: per batch)")
    if len(configs) > 1:
        handles = {h.get_label(): h for h in ax.patches if h.get_label() in configs}
        ax.legend([handles[c] for c in configs if c in handles], [c for c in configs if c in handles],
                  title="config", fontsize="small")
    ax.grid(axis="y", alpha=0.3, which="both")
    return fig


def op_cpu_seconds(df):
    """Stacked bars: CPU seconds per op, per config. ``df``: ``config, op, cpu_s``."""
    configs = list(dict.fromkeys(df["config"]))
    ops = list(dict.fromkeys(df["op"]))
    fig, ax = _figure(max(5.0, 1.2 * len(configs) + 3))
    if not ops:
        _empty(ax, "no op events")
        return fig
    bottom = np.zeros(len(configs))
    for k, op in enumerate(ops):
        vals = np.array([df.loc[(df["config"] == c) & (df["op"] == op), "cpu_s"].sum() for c in configs])
        ax.bar(configs, vals, bottom=bottom, label=op, color=f"C{k % 10}")
        bottom += vals
    ax.set_ylabel("CPU time in workers (s)")
    ax.set_xlabel("config")
    ax.set_title("Where preprocessing CPU time goes")
    ax.legend(title="op", fontsize="small", bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return fig


SCATTER_MAX_POINTS = 1_000_000  # a per-batch scatter draws at most about this many points (:func:`_thinned`)


def _thinned(y: np.ndarray) -> tuple[np.ndarray, str]:
    """(indices to draw, a note) of a per-batch scatter: every point up to :data:`SCATTER_MAX_POINTS`; past it,
    every point at or above the 500 ms line and every k-th of the others (a million points already fill a
    figure; drawing them is ~130 bytes a point while matplotlib places the legend)."""
    n = len(y)
    if n <= SCATTER_MAX_POINTS:
        return np.arange(n), ""
    high = y >= WAIT_LINE_MS
    k = -(-int((~high).sum()) // max(SCATTER_MAX_POINTS - int(high.sum()), SCATTER_MAX_POINTS // 10))
    low = np.flatnonzero(~high)[::k]
    return np.sort(np.concatenate([np.flatnonzero(high), low])), \
        f" (of {n:,} batches: all >= {WAIT_LINE_MS:.0f} ms, every {k:,}th of the others)"


def wait_plot(df, *, sort: str = "batch_id", title: str = ""):
    """Wait per batch (log y) with a 500 ms line. ``df``: :func:`~lotus.analysis.plotdata.wait_frame`."""
    fig, ax = _figure()
    if df.empty:
        _empty(ax, "wait unknown (no wait events in this run)")
        return fig
    y = np.maximum(df["wait_ms"].to_numpy(), 1e-3)
    buf = df["buffered"].to_numpy(dtype=bool)
    if sort == "duration":
        ax.plot(df["x"].to_numpy(), y, drawstyle="steps-mid", color=_COLORS["wait"], label="wait")
        ax.set_xlabel("batches, by decreasing wait")
    else:
        keep, note = _thinned(y)
        x, y, buf = df["x"].to_numpy()[keep], y[keep], buf[keep]
        ax.scatter(x[~buf], y[~buf], s=8, color=_COLORS["wait"], label="waited")
        if buf.any():
            ax.scatter(x[buf], y[buf], s=8, color="0.5", label="already buffered")
        ax.set_xlabel("batch (consumption order)" + note)
    ax.axhline(WAIT_LINE_MS, color="k", ls="--", lw=1, label="500 ms")
    ax.set_yscale("log")
    ax.set_ylabel("training loop wait (ms, log scale)")
    ax.set_title(f"Wait for each batch{' - ' + title if title else ''}")
    fast_best(ax.legend(fontsize="small"))
    ax.grid(alpha=0.3, which="both")
    return fig


def delay_plot(df, *, title: str = ""):
    """Delay (consumed - end of preprocessing) per batch, log y. ``df``: ``x, delay_ms``."""
    fig, ax = _figure()
    if df.empty:
        _empty(ax, "delay unknown (no consumption events)")
        return fig
    y = np.maximum(df["delay_ms"].to_numpy(), 1e-3)
    keep, note = _thinned(y)
    ax.scatter(df["x"].to_numpy()[keep], y[keep], s=8, color="#8172B2")
    ax.axhline(WAIT_LINE_MS, color="k", ls="--", lw=1, label="500 ms")
    ax.set_yscale("log")
    ax.set_xlabel("batch (consumption order)" + note)
    ax.set_ylabel("delay: ready until consumed (ms, log scale)")
    ax.set_title(f"Delay of each batch{' - ' + title if title else ''}")
    fast_best(ax.legend(fontsize="small"))
    ax.grid(alpha=0.3, which="both")
    return fig


def worker_timeline(df, *, title: str = ""):
    """Gantt chart: workers' batch preprocessing and the loop's waits and steps. ``df``: ``lane, kind,
    start_s, dur_s``."""
    lanes = sorted(set(df["lane"]), key=lambda s: (s == "training loop", s)) if len(df) else []
    fig, ax = _figure(10.0, max(2.5, 0.5 * len(lanes) + 1.5))
    if not lanes:
        _empty(ax, "no batches")
        return fig
    for i, lane in enumerate(lanes):
        for kind, g in df[df["lane"] == lane].groupby("kind", sort=False):
            ax.broken_barh(list(zip(g["start_s"], g["dur_s"], strict=True)), (i - 0.4, 0.8),
                           facecolors=_COLORS.get(kind, "0.5"), edgecolor="white", linewidth=0.3, label=kind)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("time since the start of the epoch (s)")
    ax.set_title(f"Worker timeline{' - ' + title if title else ''}", loc="right")
    handles = {}
    for c in ax.collections:
        handles.setdefault(c.get_label(), c)
    ax.legend(handles.values(), handles.keys(), fontsize="small", loc="lower left", bbox_to_anchor=(0, 1.02),
              ncols=3, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig


def save_figure(fig, out_dir: str | os.PathLike, name: str, formats=("png", "svg")) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<fmt>`` for each format (Agg for raster output)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    paths = []
    for fmt in formats:
        p = out / f"{name}.{fmt}"
        fig.savefig(p, dpi=120)
        paths.append(p)
    return paths


def safe_name(text: str) -> str:
    """A file-name-safe version of a config name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip("_") or "run"


TRIM_ROWS = 100_000  # a run of fewer batches: its figures are not collected apart (a collection: ~50 ms)


def _trimmed(fig=None, rows: int = TRIM_ROWS):
    """``fig``, once the figures no longer referenced are collected (a figure is a cycle of objects: only the
    cycle collector frees it, and one of every batch holds ~100 bytes a point) and what was freed is handed
    back to the OS (glibc keeps it otherwise). Called before a figure of every batch is made and after: a
    caller that drops each figure once drawn (``del fig``) makes and draws the next without it. Skipped for
    figures of fewer than :data:`TRIM_ROWS` batches (``rows``): a few MB at most, where a full collection
    costs ~50 ms (5 a report: ~12% of a small run's report)."""
    if rows < TRIM_ROWS:
        return fig
    import gc

    from lotus.trace.original import release_freed_memory

    gc.collect()
    release_freed_memory()
    return fig


def all_figures(configs, *, remove_outliers: bool = False, sort: str = "batch_id"):
    """``(file name, Figure)`` pairs of every figure for ``configs`` (:class:`~lotus.analysis.runs.Config`
    list): cross-config figures first, then wait, delay and worker timeline per config. Made one at a time:
    a caller that drops each once drawn holds one figure at a time (:func:`_trimmed`)."""
    from lotus.analysis import plotdata as pdata

    # a scanned run's compact table (summary_batches): each frame made of the columns it reads, one at a time
    batches = ((c.name, c.summary_batches) for c in configs)
    events = [(c.name, c.events) for c in configs]
    rows = sum(len(c.summary_batches) for c in configs)
    yield "preprocessing_box", _trimmed(preprocessing_box(pdata.preprocessing_frame(batches,
                                                                                    remove_outliers=remove_outliers)),
                                        rows)
    yield "op_times", op_distributions(pdata.op_frame(events))
    yield "op_cpu_seconds", op_cpu_seconds(pdata.op_seconds_frame(events))
    for c in configs:
        tag = safe_name(c.name)
        b = c.summary_batches
        n = len(b)
        _trimmed(rows=n)
        yield f"wait_{tag}", _trimmed(wait_plot(pdata.wait_frame(b, sort=sort), sort=sort, title=c.name), n)
        _trimmed(rows=n)
        yield f"delay_{tag}", _trimmed(delay_plot(pdata.delay_frame(b), title=c.name), n)
        yield f"timeline_{tag}", worker_timeline(pdata.timeline_frame(b), title=c.name)
