"""The long-form DataFrames the figures draw (pure functions of events/batches; no matplotlib here).

A scanned run (:mod:`lotus.query.scan`, no per-op events in memory) gives the same frames: its op
durations are read again from its files (:mod:`lotus.analysis.scanops`); the batch frames read its
batches DataFrame (made from the scan's compact table: O(batches)).

Failed batches are in no distribution (preprocessing, ops, wait, delay); the worker timeline draws
them as ``failed`` bars. Exhausted fetches are no batches and are drawn nowhere."""

from __future__ import annotations

import numpy as np

from lotus.analysis.stats import op_durations, op_engine, prepared, split_outliers
from lotus.analysis.wait import waited
from lotus.query import failed_mask

TIMELINE_MAX_BATCHES = 400
# of the batches, what each frame reads: of a scanned run's compact table, a DataFrame of only these is made
PREP_COLUMNS = ("prep_dur_ns", "failed")
WAIT_COLUMNS = ("rank", "loader", "epoch", "batch_id", "failed", "wait_dur_ns", "consumed_ns", "delay_ns", "buffered")
DELAY_COLUMNS = ("rank", "loader", "epoch", "batch_id", "failed", "consumed_ns", "delay_ns")
TIMELINE_COLUMNS = ("rank", "loader", "epoch", "batch_id", "worker_id", "failed", "prep_start_ns", "prep_dur_ns",
                    "wait_start_ns", "wait_dur_ns", "consumed_ns", "step_dur_ns")


def _columns(batches, columns):
    """``batches`` itself (a DataFrame), or a DataFrame of ``columns`` made from a scanned run's compact table
    (:meth:`lotus.query.BatchTable.frame`: the same values; the whole batches DataFrame is never made)."""
    from lotus.analysis import compact

    return batches.frame(list(columns)) if compact.is_table(batches) else batches


def preprocessing_frame(configs, *, remove_outliers: bool = False):
    """``config, prep_ms``: one row per prepared batch of every config (configs: (name, batches) pairs; batches:
    a DataFrame or a scanned run's compact table)."""
    import pandas as pd

    parts = []
    for name, batches in configs:
        batches = _columns(batches, PREP_COLUMNS)
        b = split_outliers(batches)[0] if remove_outliers else prepared(batches)
        parts.append(pd.DataFrame({"config": name,
                                   "prep_ms": b["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / 1e6}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["config", "prep_ms"])


def op_frame(configs, *, max_per_op: int = 20_000, seed: int = 0):
    """``config, op, ms``: per-call op times (a uniform sample of at most ``max_per_op`` per op and config,
    enough for a distribution plot). configs: (name, events) pairs."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    parts = []
    for name, events in configs:
        if op_engine(events) is not None:  # a scanned run: the same values, picked from its files
            from lotus.analysis.scanops import op_samples

            per_op = op_samples(events, rng, max_per_op)
        else:
            per_op = op_durations(events)
        for op, d in per_op.items():
            if d.size > max_per_op:
                d = rng.choice(d, max_per_op, replace=False)
            parts.append(pd.DataFrame({"config": name, "op": op, "ms": d / 1e6}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["config", "op", "ms"])


def op_seconds_frame(configs):
    """``config, op, cpu_s``: total time per op (load, transform ops, collate; not the overlapping totals)."""
    import pandas as pd

    from lotus.analysis.stats import PER_BATCH_OPS
    from lotus.query import detail_share

    rows = []
    for name, events in configs:
        share = detail_share(events)  # per-op detail for a share of the batches: scaled to all of them
        if op_engine(events) is not None:  # a scanned run: exact integer sums of the same ops
            from lotus.analysis.scanops import kept_totals

            sums = {op: total for op, (_, total) in kept_totals(events).items()}
        else:
            sums = {op: d.sum() for op, d in op_durations(events).items()}
        for op, total in sums.items():
            if op not in ("transform", "sample"):
                scale = 1.0 if op in PER_BATCH_OPS else share
                rows.append({"config": name, "op": op, "cpu_s": float(total) / 1e9 / scale if total else 0.0})
    return pd.DataFrame(rows, columns=["config", "op", "cpu_s"])


def wait_frame(batches, *, sort: str = "batch_id"):
    """``x, batch_id, epoch, rank, wait_ms, delay_ms, buffered``: waited batches in consumption order
    (``sort="batch_id"``) or by decreasing wait (``"duration"``); ``x`` is the plotting position."""
    import pandas as pd

    w = waited(_columns(batches, WAIT_COLUMNS), ["batch_id", "epoch", "rank", "wait_dur_ns", "delay_ns", "buffered"])
    t = pd.DataFrame({
        "batch_id": w["batch_id"].to_numpy(), "epoch": w["epoch"].to_numpy(), "rank": w["rank"].to_numpy(),
        "wait_ms": w["wait_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / 1e6,
        "delay_ms": w["delay_ns"].to_numpy(dtype=np.float64, na_value=np.nan) / 1e6,
        "buffered": w["buffered"].to_numpy(dtype=bool, na_value=False),
    })
    if sort == "duration":
        t = t.sort_values("wait_ms", ascending=False, kind="stable", ignore_index=True)
    t.insert(0, "x", np.arange(len(t)))
    return t


def delay_frame(batches):
    """``x, batch_id, delay_ms``: consumed batches with a known delay, in consumption order."""
    import pandas as pd

    batches = _columns(batches, DELAY_COLUMNS)
    ok = batches["delay_ns"].notna().to_numpy(dtype=bool, na_value=False)
    rows = np.flatnonzero(ok & ~failed_mask(batches))
    # the rows' order of a stable sort by (rank, loader, epoch, consumed_ns), no copy of them sorted: a
    # known delay has its consumption, so no key is missing
    keys = [batches[c].iloc[rows].to_numpy() for c in ("consumed_ns", "epoch", "loader", "rank")]
    rows = rows[np.lexsort(keys)]
    del keys
    return pd.DataFrame({"x": np.arange(len(rows)), "batch_id": batches["batch_id"].iloc[rows].to_numpy(),
                         "delay_ms": batches["delay_ns"].iloc[rows].to_numpy(dtype=np.float64) / 1e6})


def timeline_frame(batches, *, max_batches: int = TIMELINE_MAX_BATCHES):
    """``lane, kind, start_s, dur_s, batch_id``: Gantt bars of the first (rank, loader, epoch): one lane per
    worker (its batch preprocessing, ``failed`` for a fetch that raised) and one for the main loop (waits
    and steps); at most ``max_batches`` batches, from the start of that epoch."""
    import pandas as pd

    from lotus.analysis import compact

    cols = ["lane", "kind", "start_s", "dur_s", "batch_id"]
    if compact.is_table(batches):  # sorted by (rank, loader, epoch): the first non-empty group's rows only
        spans = [(lo, hi) for _, lo, hi in batches.group_spans() if hi > lo]
        batches = batches.view(*spans[0]).frame(list(TIMELINE_COLUMNS)) if spans else batches.frame(
            list(TIMELINE_COLUMNS))
    if batches.empty:
        return pd.DataFrame(columns=cols)
    first = batches.sort_values(["rank", "loader", "epoch"]).iloc[0]
    b = batches[(batches["rank"] == first["rank"]) & (batches["loader"] == first["loader"])
                & (batches["epoch"] == first["epoch"])].sort_values("batch_id").head(max_batches)
    t0 = min(int(b[c].min()) for c in ("prep_start_ns", "wait_start_ns", "consumed_ns") if b[c].notna().any())
    rows = []

    def add(lane, kind, start, dur, ids):
        ok = start.notna().to_numpy(dtype=bool, na_value=False) & dur.notna().to_numpy(dtype=bool, na_value=False)
        for s, d, i in zip((start[ok] - t0).to_numpy(np.float64) / 1e9, dur[ok].to_numpy(np.float64) / 1e9,
                           ids[ok].to_numpy(), strict=True):
            rows.append((lane, kind, s, d, int(i)))

    for wid, g in b.groupby(b["worker_id"].fillna(-1).astype("int64"), sort=True):
        lane = "main process" if wid < 0 else f"worker {wid}"
        bad = g["failed"].to_numpy(dtype=bool, na_value=False)
        add(lane, "preprocessing", g["prep_start_ns"][~bad], g["prep_dur_ns"][~bad], g["batch_id"][~bad])
        add(lane, "failed", g["prep_start_ns"][bad], g["prep_dur_ns"][bad], g["batch_id"][bad])
    add("training loop", "wait", b["wait_start_ns"], b["wait_dur_ns"], b["batch_id"])
    add("training loop", "step", b["consumed_ns"], b["step_dur_ns"], b["batch_id"])
    return pd.DataFrame(rows, columns=cols)
