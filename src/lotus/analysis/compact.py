"""The batch summaries of ``lotus analyze stats|wait|verdict`` from a scanned run's compact per-batch
columns (:class:`lotus.trace.batchtable.BatchTable`), without building its batches DataFrame.

Each function here is the twin of one in :mod:`lotus.analysis.stats`, :mod:`~lotus.analysis.wait` or
:mod:`~lotus.analysis.diagnosis` (which call it when given a table): the same rows, in the same order,
through the same numpy reductions, so the results are identical to the DataFrame path's (sums of
nanosecond integers are exact; percentiles, means and stds see the same float64 arrays; the pandas
sorts are reproduced: ``sort_values`` of one column is numpy's quicksort with missing values last,
several columns a stable lexsort). Memory: a few arrays of 8 bytes per batch at a time (rows are taken
from the stored columns before they are widened to int64; at most ~60 bytes a batch of temporaries).
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.stats import describe_ms, outlier_floor_ns

GROUP = ["rank", "loader", "epoch"]


def is_table(batches) -> bool:
    from lotus.trace.batchtable import BatchTable

    return isinstance(batches, BatchTable)


def _f64(t, name, rows=None, base: int = 0) -> np.ndarray:
    """A column as float64 ns (NaN where missing), minus ``base`` exactly first, of ``rows``."""
    v, ok = t.values(name, rows)
    out = (v - base if base else v).astype(np.float64)
    out[~ok] = np.nan
    return out


def _starts(g: np.ndarray) -> np.ndarray:
    """First index of each run of equal values of ``g``."""
    return np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)


def _first_per_group(t, sel: np.ndarray, by: str) -> np.ndarray:
    """Rows ``sel`` sorted by ``by`` as ``sort_values(by)`` does (quicksort, missing last), then the first
    row of each (rank, loader, epoch): ``sort_values(by).groupby(GROUP).head(1)``'s rows."""
    v, ok = t.values(by, sel)
    if ok.all():  # the same sort of the same values, without the index arrays
        order = np.argsort(v, kind="quicksort")
    else:
        idx = np.arange(len(sel))
        order = np.concatenate([idx[ok][np.argsort(v[ok], kind="quicksort")], idx[~ok]])
    del v, ok
    rows = sel[order]
    del order
    _, first = np.unique(t.group_ids(rows), return_index=True)
    return rows[first]


# -- stats -------------------------------------------------------------------------------------------
def prepared_rows(t, remove_outliers: bool = False):
    """(rows, their prep_dur_ns as float64, dropped outlier rows): :func:`lotus.analysis.stats.prepared`
    and :func:`~lotus.analysis.stats.split_outliers` on a table."""
    from lotus.analysis.stats import _log

    rows = np.flatnonzero(t.valid("prep_dur_ns") & ~t.failed())
    vals = t.values("prep_dur_ns", rows)[0].astype(np.float64)
    dropped = rows[:0]
    floor = outlier_floor_ns(vals) if remove_outliers else None
    if floor is not None:
        low = vals < floor
        if low.any():
            _log.info("%d batch(es) below q1 - 2*IQR (%.1f ms) dropped as outliers", int(low.sum()), floor / 1e6)
        rows, vals, dropped = rows[~low], vals[~low], rows[low]
    return rows, vals, dropped


def config_stats(events, t, *, remove_outliers: bool = False) -> dict:
    from lotus.analysis.stats import op_stats

    _, vals, dropped = prepared_rows(t, remove_outliers)
    return {
        "batch_preprocessing_ms": describe_ms(vals),
        "ops_ms": op_stats(events, exclude=t.key_frame(dropped) if len(dropped) else None),
        "outliers_removed": len(dropped),
        "outcomes": t.outcome_summary(),
    }


def preprocessing_stats(t, *, remove_outliers: bool = False, by: str | None = None) -> dict:
    rows, vals, _ = prepared_rows(t, remove_outliers)
    if by is None:
        return describe_ms(vals)
    key, ok = t.values(by, rows)
    return {int(k): describe_ms(vals[ok & (key == k)]) for k in np.unique(key[ok]).tolist()}


# -- wait --------------------------------------------------------------------------------------------
def waited_rows(t):
    """(rows of :func:`lotus.analysis.wait.waited`, in its order; start of each group among them)."""
    sel = np.flatnonzero(t.valid("wait_dur_ns") & t.valid("consumed_ns") & ~t.failed())
    gid = t.group_ids(sel)
    # groups are in key order: the stable sort by (group, consumption)
    order = np.lexsort((t.values("consumed_ns", sel)[0], gid))
    return sel[order], _starts(gid[order])


def _hol(t, rows, starts):
    from lotus.analysis.wait import hol_arrays

    ws_v, ws_ok = t.values("wait_start_ns", rows)
    base = int(ws_v[ws_ok].min())
    del ws_v, ws_ok
    ws = _f64(t, "wait_start_ns", rows, base)
    wd = _f64(t, "wait_dur_ns", rows)
    ready = _f64(t, "arrive_ns", rows, base)
    ready = np.where(np.isnan(ready), _f64(t, "prep_end_ns", rows, base), ready)
    blocked, ooo = hol_arrays(starts, ws, wd, ready)
    return wd, blocked, ooo


def _delay(t):
    return describe_ms(_f64(t, "delay_ns", np.flatnonzero(~t.failed())))


def wait_stats(t) -> dict:
    from lotus.analysis.wait import summary_of

    delay = _delay(t)  # first: its temporaries are gone before the head-of-line arrays are made
    rows, starts = waited_rows(t)
    consumed = int((t.valid("consumed_ns") & ~t.failed()).sum())
    if len(rows) == 0:
        why = ("no main-process wait events (an original log before SBatchWait, or worker files only)"
               if len(t) else "no batches")
        return {"known": False, "reason": why, "batches": consumed, "delay_ms": delay}
    wd, blocked, ooo = _hol(t, rows, starts)
    b, b_ok = t.values("buffered", rows)
    return summary_of(wd, b_ok & (b != 0), blocked, ooo, delay)


def wait_table(t, *, sort: str = "batch_id"):
    import pandas as pd

    from lotus.analysis.wait import MS, sorted_table

    rows, starts = waited_rows(t)
    wd, blocked, _ = _hol(t, rows, starts) if len(rows) else (np.zeros(0), np.zeros(0), None)
    b, b_ok = t.values("buffered", rows)
    return sorted_table(pd.DataFrame({
        **{c: t.values(c, rows)[0] for c in (*GROUP, "batch_id")},
        "worker_id": _f64(t, "worker_id", rows), "wait_ms": wd / MS, "buffered": b_ok & (b != 0),
        "delay_ms": _f64(t, "delay_ns", rows) / MS, "hol_blocked_ms": blocked / MS,
    }), sort)


# -- verdict -----------------------------------------------------------------------------------------
def _loop_rows(t) -> np.ndarray:
    """Rows with a wait and a consumption, failed batches left out (key order)."""
    return np.flatnonzero(t.valid("wait_dur_ns") & t.valid("consumed_ns") & ~t.failed())


def loop_spans(t):
    import pandas as pd

    from lotus.analysis.diagnosis import LOOP_SPAN_COLUMNS, with_span_shares

    sel = _loop_rows(t)
    if not len(sel):
        return pd.DataFrame(columns=LOOP_SPAN_COLUMNS)
    gid = t.group_ids(sel)
    starts = _starts(gid)
    ws, ws_ok = t.values("wait_start_ns", sel)
    out = pd.DataFrame({
        **{c: t.keys[gid[starts], i] for i, c in enumerate(GROUP)},
        "batches": np.diff(np.append(starts, len(sel))),
        "start_ns": np.minimum.reduceat(np.where(ws_ok, ws, np.iinfo(np.int64).max), starts),
        "end_ns": np.maximum.reduceat(t.values("consumed_ns", sel)[0], starts),
        "wait_ns": np.add.reduceat(t.values("wait_dur_ns", sel)[0], starts),
    })
    return with_span_shares(out)


def startup_wait_ns(t) -> float:
    sel = _loop_rows(t)
    if not len(sel):
        return 0.0
    return float(t.values("wait_dur_ns", _first_per_group(t, sel, "consumed_ns"))[0].sum())


def first_batch_wait_ns(t) -> float:
    ok = ~t.failed()
    if not ok.any():
        return 0.0
    ep = t.keys[:, 2]  # per group (groups are not empty): the epochs after the first with a batch not failed
    first = ep[np.logical_or.reduceat(ok, np.r_[0, np.cumsum(t.counts)[:-1]])].min()
    sel = np.flatnonzero(ok & t.valid("wait_dur_ns") & np.repeat(ep > first, t.counts))
    if not len(sel):
        return 0.0
    return float(t.values("wait_dur_ns", _first_per_group(t, sel, "consumed_ns"))[0].sum())


def _epoch_spans(t) -> dict[tuple[int, int, int], float]:
    """``epoch_spans`` of :mod:`lotus.analysis.diagnosis`: (rank, loader, epoch) -> span ns (float)."""
    sel = np.flatnonzero(~t.failed())
    if not len(sel):
        return {}
    start = np.fmin(np.fmin(_f64(t, "dispatch_ns", sel), _f64(t, "wait_start_ns", sel)), _f64(t, "prep_start_ns", sel))
    end = np.fmax(_f64(t, "consumed_ns", sel), _f64(t, "prep_end_ns", sel))
    gid = t.group_ids(sel)
    starts = _starts(gid)
    span = np.fmax.reduceat(end, starts) - np.fmin.reduceat(start, starts)
    return {tuple(int(x) for x in t.keys[g]): float(s) for g, s in zip(gid[starts], span, strict=True)}


def worker_utilisation(t):
    import pandas as pd

    from lotus.analysis.diagnosis import UTILISATION_COLUMNS, utilisation_of

    rows = np.flatnonzero(t.valid("prep_dur_ns") & ~t.failed())
    if not len(rows):
        return pd.DataFrame(columns=UTILISATION_COLUMNS)
    spans = _epoch_spans(t)
    w, w_ok = t.values("worker_id", rows)
    w = np.where(w_ok, w, -1)
    del w_ok
    gid = t.group_ids(rows)
    # by (rank, worker_id, loader, epoch): groups are in (rank, loader, epoch) order, so within a rank
    # the group id orders (loader, epoch) alike; the same stable sort with one key less
    order = np.lexsort((gid, w, t.keys[gid, 0]))
    rows, w, gid = rows[order], w[order], gid[order]
    del order
    new = np.zeros(len(rows), bool)
    new[0] = True
    new[1:] = (w[1:] != w[:-1]) | (gid[1:] != gid[:-1])
    starts = np.flatnonzero(new)
    del new
    g = gid[starts]
    per_epoch = pd.DataFrame({"rank": t.keys[g, 0], "worker_id": w[starts], "loader": t.keys[g, 1],
                              "epoch": t.keys[g, 2]})
    per_epoch["batches"] = np.diff(np.append(starts, len(rows)))
    per_epoch["busy_ns"] = pd.array(np.add.reduceat(t.values("prep_dur_ns", rows)[0], starts), dtype="Int64")
    return utilisation_of(per_epoch, spans)


def prep_total_ns(t) -> float:
    return float(int(t.values("prep_dur_ns", np.flatnonzero(t.valid("prep_dur_ns") & ~t.failed()))[0].sum()) or 0)


def consumed_count(t) -> int:
    return int((t.valid("consumed_ns") & ~t.failed()).sum())
