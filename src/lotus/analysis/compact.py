"""The batch summaries of ``lotus analyze stats|wait|verdict`` from a scanned run's compact per-batch
columns (:class:`lotus.query.batchtable.BatchTable`), without building its batches DataFrame.

Each function here is the twin of one in :mod:`lotus.analysis.stats`, :mod:`~lotus.analysis.wait` or
:mod:`~lotus.analysis.diagnosis` (which call it when given a table): the same rows, in the same order,
through the same numpy reductions, so the results are identical to the DataFrame path's (sums of
nanosecond integers are exact; percentiles, means and stds see the same float64 arrays; the pandas
sorts are reproduced: ``sort_values`` of one column is numpy's quicksort with missing values last,
several columns a stable lexsort).

Memory flat in the number of batches (issue 17): the table is read a view of
:data:`lotus.query.batchtable.ROWS` rows at a time (its columns are on disk, :mod:`lotus.query.spill`);
whole-run statistics are computed from streams of values (:mod:`lotus.analysis.exactstats`: numpy's
pairwise sums and exact percentiles, bit for bit); the wait summary replays one (rank, loader, epoch)
at a time, so what it holds grows with the largest epoch of one loader, not with the run. The verdict's
functions are in :mod:`lotus.analysis.compactverdict`.
"""

from __future__ import annotations

import logging

import numpy as np

from lotus.analysis.describe import outlier_floor_ns
from lotus.analysis.exactstats import Floats, describe, pairwise_sum, percentiles
from lotus.analysis.waitcore import MS, hol_arrays, sorted_order, summary_dict

_log = logging.getLogger("lotus.analysis")

GROUP = ["rank", "loader", "epoch"]


def is_table(batches) -> bool:
    from lotus.query import BatchTable

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
def _prepared(v) -> np.ndarray:
    """The mask of a view's rows :func:`lotus.analysis.stats.prepared` keeps (a preparation time, not failed)."""
    return v.valid("prep_dur_ns") & ~v.failed()


def _prep(v) -> tuple[np.ndarray, np.ndarray]:
    """(rows, their prep_dur_ns as float64) of a view: :func:`lotus.analysis.stats.prepared`."""
    rows = np.flatnonzero(_prepared(v))
    return rows, v.values("prep_dur_ns", rows)[0].astype(np.float64)


def _outlier_floor(t) -> float | None:
    """:func:`lotus.analysis.stats.outlier_floor_ns` of the prepared batches' times."""
    fl = Floats()
    try:
        for v in t.views():
            fl.add(_prep(v)[1])
        if fl.n < 4 or not fl.spilled:
            return outlier_floor_ns(fl.array())
        q1, q3 = percentiles(fl, [25, 75])
        return float(q1 - 2 * (q3 - q1))
    finally:
        fl.close()


def prepared_streams(t, remove_outliers: bool = False, by: str | None = None):
    """({key: stream of prep times in ms}, dropped outlier rows): :func:`lotus.analysis.stats.prepared`
    and :func:`~lotus.analysis.stats.split_outliers` on a table; key None without ``by``, else the
    values of column ``by``."""
    floor = _outlier_floor(t) if remove_outliers else None
    streams: dict = {} if by is not None else {None: Floats()}
    dropped = []
    for v in t.views():
        rows, vals = _prep(v)
        if floor is not None:
            low = vals < floor
            if low.any():
                dropped.append(rows[low] + v.offset)
                rows, vals = rows[~low], vals[~low]
        if by is None:
            streams[None].add(vals / 1e6)
            continue
        key, ok = v.values(by, rows)
        for k in np.unique(key[ok]).tolist():
            streams.setdefault(k, Floats(limit=1 << 16)).add(vals[ok & (key == k)] / 1e6)
    dropped = np.concatenate(dropped) if dropped else np.zeros(0, np.int64)
    if len(dropped):
        _log.info("%d batch(es) below q1 - 2*IQR (%.1f ms) dropped as outliers", len(dropped), floor / 1e6)
    return streams, dropped


def _described(fl: Floats) -> dict:
    try:
        return describe(fl)
    finally:
        fl.close()


def preprocessing_stats(t, *, remove_outliers: bool = False, by: str | None = None) -> dict:
    streams, _ = prepared_streams(t, remove_outliers, by)
    if by is None:
        return _described(streams[None])
    return {int(k): _described(streams[k]) for k in sorted(streams)}


# -- wait --------------------------------------------------------------------------------------------
def waited_rows(t):
    """(rows of :func:`lotus.analysis.wait.waited`, in its order; start of each group among them)."""
    sel = np.flatnonzero(t.valid("wait_dur_ns") & t.valid("consumed_ns") & ~t.failed())
    gid = t.group_ids(sel)
    # groups are in key order: the stable sort by (group, consumption)
    order = np.lexsort((t.values("consumed_ns", sel)[0], gid))
    return sel[order], _starts(gid[order])


def _loop_rows(t) -> np.ndarray:
    """Rows with a wait and a consumption, failed batches left out (key order)."""
    return np.flatnonzero(t.valid("wait_dur_ns") & t.valid("consumed_ns") & ~t.failed())


def _wait_base(t) -> int:
    """The earliest wait start of the waited batches (their times are taken relative to it)."""
    lows = []
    for v in t.views():
        ws, ok = v.values("wait_start_ns", _loop_rows(v))
        if ok.any():
            lows.append(ws[ok].min())
    return int(np.array(lows, np.int64).min())  # none: numpy's error, as on the whole column


def _hol(t, rows, starts, base: int | None = None):
    if base is None:
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
    fl = Floats()
    for v in t.views():
        d = _f64(v, "delay_ns", np.flatnonzero(~v.failed()))
        fl.add(d[~np.isnan(d)] / 1e6)
    return _described(fl)


def _nan0(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), 0.0, a)


def _sum(fl: Floats) -> np.float64:
    return pairwise_sum(fl.read, 0, fl.n, fl.chunk)


def wait_stats(t) -> dict:
    delay = _delay(t)  # first: its temporaries are gone before the head-of-line arrays are made
    n = sum(len(_loop_rows(v)) for v in t.views())
    if n == 0:
        why = ("no main-process wait events (an original log before SBatchWait, or worker files only)"
               if len(t) else "no batches")
        return {"known": False, "reason": why, "batches": consumed_count(t), "delay_ms": delay}
    base = _wait_base(t)
    wait_ns, wait_ms, blocked_ns, saved = Floats(), Floats(), Floats(), Floats()
    counts = np.zeros(5, np.int64)  # buffered, <= 1 ms, > 1 ms, > 500 ms (not buffered); blocked batches
    try:
        for _, lo, hi in t.group_spans():  # one (rank, loader, epoch) at a time, in consumption order
            v = t.view(lo, hi)
            sel = _loop_rows(v)
            if not len(sel):
                continue
            rows = sel[np.argsort(v.values("consumed_ns", sel)[0], kind="stable")]
            wd, blocked, ooo = _hol(v, rows, np.zeros(1, np.int64), base)
            b, b_ok = v.values("buffered", rows)
            buf = b_ok & (b != 0)
            counts += [buf.sum(), (~buf & (wd <= MS)).sum(), (~buf & (wd > MS)).sum(),
                       (~buf & (wd > 500 * MS)).sum(), (blocked > 0).sum()]
            wait_ns.add(_nan0(wd))  # pandas' sums (summary_of): NaN counts as 0
            wait_ms.add(wd[~np.isnan(wd)] / 1e6)
            blocked_ns.add(_nan0(blocked))
            saved.add(_nan0(wd - ooo))
            del v, rows, wd, blocked, ooo, b, b_ok, buf
            t.release()
        buckets = {k: float(c / n) for k, c in zip(("buffered", "up_to_1ms", "over_1ms", "over_500ms"),
                                                   counts[:4], strict=True)}
        return summary_dict(n, buckets, describe(wait_ms), delay, float(_sum(wait_ns)), _sum(blocked_ns),
                            int(counts[4]), max(0.0, float(_sum(saved))))
    finally:
        for fl in (wait_ns, wait_ms, blocked_ns, saved):
            fl.close()


def prepared_count(t) -> int:
    """``len(lotus.analysis.stats.prepared(batches))`` of a table."""
    return sum(int(_prepared(v).sum()) for v in t.views())


def valid_count(t, name: str) -> int:
    """``batches[name].notna().sum()`` of a table."""
    return sum(int(v.valid(name).sum()) for v in t.views())


def consumed_count(t) -> int:
    return sum(int((v.valid("consumed_ns") & ~v.failed()).sum()) for v in t.views())


def wait_table(t, *, sort: str = "batch_id"):
    import pandas as pd

    rows, starts = waited_rows(t)
    wd, blocked, _ = _hol(t, rows, starts) if len(rows) else (np.zeros(0), np.zeros(0), None)
    del starts
    b, b_ok = t.values("buffered", rows)
    cols = {c: t.values(c, rows)[0] for c in (*GROUP, "batch_id")}
    cols.update({"worker_id": _f64(t, "worker_id", rows), "wait_ms": wd / MS, "buffered": b_ok & (b != 0),
                 "delay_ms": _f64(t, "delay_ns", rows) / MS, "hol_blocked_ms": blocked / MS})
    del rows, wd, blocked, b, b_ok
    # sorted_table's order, each column put in it one at a time (no sorted copy of the whole table)
    order = sorted_order(cols, sort)
    if order is not None:
        for c in cols:
            cols[c] = cols[c][order]
    del order
    return pd.DataFrame(cols, copy=False)
