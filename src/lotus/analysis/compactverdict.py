"""The verdict's batch numbers (:mod:`lotus.analysis.diagnosis`) from a scanned run's compact table,
a view of rows at a time (see :mod:`lotus.analysis.compact`): per-group minima, maxima and integer
sums merged across views (exact in any order), the same rows and orders as the DataFrame path.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.compact import GROUP, _f64, _first_per_group, _loop_rows, _starts
from lotus.analysis.shares import LOOP_SPAN_COLUMNS, UTILISATION_COLUMNS, utilisation_of, with_span_shares

_I64_MAX = np.iinfo(np.int64).max


def loop_spans(t):
    import pandas as pd

    acc: dict[int, list[int]] = {}  # group -> [batches, first wait start, last consumption, wait]
    for v in t.views():
        sel = _loop_rows(v)
        if not len(sel):
            continue
        gid = v.group_ids(sel)
        starts = _starts(gid)
        ws, ws_ok = v.values("wait_start_ns", sel)
        cols = (np.diff(np.append(starts, len(sel))),
                np.minimum.reduceat(np.where(ws_ok, ws, _I64_MAX), starts),
                np.maximum.reduceat(v.values("consumed_ns", sel)[0], starts),
                np.add.reduceat(v.values("wait_dur_ns", sel)[0], starts))
        for g, n, lo, hi, w in zip((gid[starts] + v.first_group).tolist(), *(c.tolist() for c in cols), strict=True):
            a = acc.get(g)
            acc[g] = [n, lo, hi, w] if a is None else [a[0] + n, min(a[1], lo), max(a[2], hi), a[3] + w]
    if not acc:
        return pd.DataFrame(columns=LOOP_SPAN_COLUMNS)
    gs = np.array(sorted(acc), np.int64)
    vals = np.array([acc[g] for g in gs.tolist()], np.int64).reshape(-1, 4)
    out = pd.DataFrame({
        **{c: t.keys[gs, i] for i, c in enumerate(GROUP)},
        "batches": vals[:, 0].copy(), "start_ns": vals[:, 1].copy(), "end_ns": vals[:, 2].copy(),
        "wait_ns": vals[:, 3].copy(),
    })
    return with_span_shares(out)


def _first_wait_sum(t, rows_of) -> float:
    """The wait of the first batch by consumption (missing last) of each group among the rows
    ``rows_of(view)``, summed: ``_first_per_group(t, rows, "consumed_ns")``'s. Where a group's earliest
    consumption is shared by several rows, numpy's quicksort of the whole selection decides which is
    first: that case is computed on the whole table."""
    best: dict[int, list] = {}  # group -> [earliest consumption, its wait, ties, any consumption at all]
    for v in t.views():
        sel = rows_of(v)
        if not len(sel):
            continue
        c, ok = v.values("consumed_ns", sel)
        for g, new in _view_firsts(v.group_ids(sel) + v.first_group, c, ok,
                                   v.values("wait_dur_ns", sel)[0]).items():
            b = best.get(g)
            if b is None or (new[3] and (not b[3] or new[0] < b[0])):
                best[g] = new
            elif new[3] and new[0] == b[0]:
                b[2] += 1 + new[2]
    if any(b[2] for b in best.values()):
        sel = np.concatenate([rows_of(v) + v.offset for v in t.views()])
        return float(t.values("wait_dur_ns", _first_per_group(t, sel, "consumed_ns"))[0].sum())
    return float(np.array([b[1] for b in best.values()], np.int64).sum())


def _view_firsts(gid: np.ndarray, c: np.ndarray, ok: np.ndarray, w: np.ndarray) -> dict[int, list]:
    """Per group of a view's rows (``gid`` ascending): [earliest consumption, its wait, other rows with
    it, True], or [0, wait of the first row, 0, False] for a group without a consumption."""
    out = {}
    if ok.any():
        gv, cv, wv = gid[ok], c[ok], w[ok]
        o = np.lexsort((cv, gv))
        gv, cv, wv = gv[o], cv[o], wv[o]
        st = _starts(gv)
        ends = np.append(st[1:], len(gv))
        tie = (st + 1 < ends) & (cv[np.minimum(st + 1, len(cv) - 1)] == cv[st])
        for g, ci, wi, ti in zip(gv[st].tolist(), cv[st].tolist(), wv[st].tolist(), tie.tolist(), strict=True):
            out[g] = [ci, wi, int(ti), True]
    if not ok.all():
        gm, wm = gid[~ok], w[~ok]
        st = _starts(gm)
        for g, wi in zip(gm[st].tolist(), wm[st].tolist(), strict=True):
            out.setdefault(g, [0, wi, 0, False])
    return out


def startup_wait_ns(t) -> float:
    return _first_wait_sum(t, _loop_rows)


def first_batch_wait_ns(t) -> float:
    ep = t.keys[:, 2]  # per group: the epochs after the first with a batch not failed
    any_ok = np.zeros(len(t.keys), bool)
    for v in t.views():
        ok = ~v.failed()
        if ok.any():
            g = np.unique(v.group_ids(np.flatnonzero(ok))) + v.first_group
            any_ok[g] = True
    if not any_ok.any():
        return 0.0
    first = ep[any_ok].min()

    def rows_of(v):
        later = np.repeat(v.keys[:, 2] > first, v.counts)
        return np.flatnonzero(~v.failed() & v.valid("wait_dur_ns") & later)

    return _first_wait_sum(t, rows_of)


def _epoch_spans(t) -> dict[tuple[int, int, int], float]:
    """``epoch_spans`` of :mod:`lotus.analysis.diagnosis`: (rank, loader, epoch) -> span ns (float)."""
    acc: dict[int, list] = {}  # group -> [earliest start, latest end] (numpy's fmin / fmax: NaN ignored)
    for v in t.views():
        sel = np.flatnonzero(~v.failed())
        if not len(sel):
            continue
        start = np.fmin(np.fmin(_f64(v, "dispatch_ns", sel), _f64(v, "wait_start_ns", sel)),
                        _f64(v, "prep_start_ns", sel))
        end = np.fmax(_f64(v, "consumed_ns", sel), _f64(v, "prep_end_ns", sel))
        gid = v.group_ids(sel)
        starts = _starts(gid)
        lo, hi = np.fmin.reduceat(start, starts), np.fmax.reduceat(end, starts)
        for g, a, b in zip((gid[starts] + v.first_group).tolist(), lo, hi, strict=True):
            x = acc.get(g)
            acc[g] = [a, b] if x is None else [np.fmin(x[0], a), np.fmax(x[1], b)]
    return {tuple(int(x) for x in t.keys[g]): float(b - a) for g, (a, b) in sorted(acc.items())}


def worker_utilisation(t):
    import pandas as pd

    acc: dict[tuple[int, int, int], list[int]] = {}  # (rank, worker_id, group) -> [batches, busy ns]
    for v in t.views():
        rows = np.flatnonzero(v.valid("prep_dur_ns") & ~v.failed())
        if not len(rows):
            continue
        w, w_ok = v.values("worker_id", rows)
        w = np.where(w_ok, w, -1)
        gid = v.group_ids(rows) + v.first_group
        dur = v.values("prep_dur_ns", rows)[0]
        order = np.lexsort((gid, w))
        w, gid, dur = w[order], gid[order], dur[order]
        new = np.r_[True, (w[1:] != w[:-1]) | (gid[1:] != gid[:-1])]
        starts = np.flatnonzero(new)
        for wk, g, n, busy in zip(w[starts].tolist(), gid[starts].tolist(),
                                  np.diff(np.append(starts, len(w))).tolist(),
                                  np.add.reduceat(dur, starts).tolist(), strict=True):
            key = (int(t.keys[g, 0]), wk, g)
            a = acc.setdefault(key, [0, 0])
            a[0] += n
            a[1] += busy
    if not acc:
        return pd.DataFrame(columns=UTILISATION_COLUMNS)
    spans = _epoch_spans(t)
    keys = sorted(acc)  # by (rank, worker_id, loader, epoch): the group orders (loader, epoch) within a rank
    g = np.array([k[2] for k in keys], np.int64)
    per_epoch = pd.DataFrame({"rank": t.keys[g, 0], "worker_id": np.array([k[1] for k in keys], np.int64),
                              "loader": t.keys[g, 1], "epoch": t.keys[g, 2]})
    per_epoch["batches"] = np.array([acc[k][0] for k in keys], np.int64)
    per_epoch["busy_ns"] = pd.array(np.array([acc[k][1] for k in keys], np.int64), dtype="Int64")
    return utilisation_of(per_epoch, spans)


def prep_total_ns(t, *, detail_only: bool = False) -> float:
    """Total preprocessing time of the successful batches (``detail_only``: of the detail batches)."""
    from lotus.trace.schema import FETCH_DETAIL

    total = 0
    for v in t.views():
        keep = v.valid("prep_dur_ns") & ~v.failed()
        if detail_only:
            f, ok = v.values("_fetch_flags")
            keep &= ok & (f > 0) & ((f & FETCH_DETAIL) != 0)
        total += int(v.values("prep_dur_ns", np.flatnonzero(keep))[0].sum())
    return float(total or 0)
