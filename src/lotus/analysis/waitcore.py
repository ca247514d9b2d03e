"""The head-of-line replay and the wait summary's dict, shared by the DataFrame path
(:mod:`lotus.analysis.wait`) and the compact tables (:mod:`lotus.analysis.compact`). numpy only.
"""

from __future__ import annotations

import itertools

import numpy as np

GROUP = ["rank", "loader", "epoch"]
MS = 1_000_000


HOL_BLOCK = 1 << 16  # rows of a group handled at once by hol_arrays (its temporaries are a block's)


def hol_arrays(starts: np.ndarray, ws: np.ndarray, wd: np.ndarray, ready: np.ndarray, block: int = HOL_BLOCK):
    """(head-of-line blocked ns, wait ns with in_order=False) of waited batches in consumption order:
    ``starts``, the first row of each (rank, loader, epoch); ``ws``, ``wd``, ``ready``: wait start, wait
    and ready time, float ns (NaN: unknown), as :func:`hol_per_batch` computes them. Each group is
    handled ``block`` rows at a time; the running minimum, sum and maximum carried from block to block
    give the very floats of whole-group numpy calls (sums are accumulated in the same order)."""
    blocked = np.zeros(len(wd))
    ooo_wait = wd.copy()
    for a, b in itertools.pairwise([*np.asarray(starts).tolist(), len(wd)]):
        later, c1 = np.inf, b  # earliest ready time among the batches after the block (blocks from the last)
        while c1 > a:
            c0 = max(a, c1 - block)
            r, w, d = ready[c0:c1], ws[c0:c1], wd[c0:c1]
            low = np.minimum(np.minimum.accumulate(np.where(np.isnan(r), np.inf, r)[::-1])[::-1], later)
            lat = np.append(low[1:], later)
            later, c1 = low[0], c0
            end = w + d
            own = np.where(np.isnan(r), end, r)  # blocked only while its own batch was not ready yet
            blocked[c0: c0 + len(r)] = np.clip(np.minimum(end, own) - np.maximum(w, lat), 0, d)
        if not np.isnan(ready[a:b]).any():
            _replay(ws[a:b], wd[a:b], ready[a:b], np.sort(ready[a:b]), block, out=ooo_wait[a:b])
    return blocked, ooo_wait


def _replay(ws: np.ndarray, wd: np.ndarray, ready: np.ndarray, served: np.ndarray, block: int = HOL_BLOCK,
            out: np.ndarray | None = None) -> np.ndarray:
    """Waits of the loop if the k-th request were served by a batch ready at ``served[k]``.

    The loop's own time between requests (``gap``) and the hand-off after a batch is ready (``h``)
    stay as measured: ``u_k = max(t_k, served_k)``, ``consumed_k = u_k + h_k``,
    ``t_{k+1} = consumed_k + gap_k``; solved in closed form with a running maximum, ``block`` rows at a
    time (the cumulative sum and maximum carried over: the same floats as in one go).
    """
    out = np.empty(len(ws)) if out is None else out
    big, top, u_e = 0.0, None, None  # sum of e before the block, running max of v, u + e of the row before
    for i in range(0, len(ws), block):
        j = min(i + block, len(ws))
        w, d = ws[i:j], wd[i:j]
        h = np.maximum(0.0, d - np.clip(ready[i:j] - w, 0, None))  # hand-off once the batch is ready
        e = h + (np.append(ws[i + 1: j + 1], 0.0 if j == len(ws) else []) - (w + d))
        if j == len(ws):
            e[-1] = h[-1] + 0.0  # the last gap is 0
        if i:
            e_c = e.copy()
            e_c[0] = big + e_c[0]
            cum = np.cumsum(e_c)
            big_e = np.append(big, cum[:-1])
        else:
            cum = np.cumsum(e)
            big_e = np.append(0.0, cum[:-1])
        big = cum[-1]
        v = served[i:j] - big_e
        if not i:
            v[0] = max(ws[0], served[0])
        m = np.maximum.accumulate(v)
        if top is not None:
            m = np.maximum(m, top)
        top = m[-1]
        u = big_e + m
        t = np.append(ws[0] if not i else u_e, u[:-1] + e[:-1])
        u_e = u[-1] + e[-1]
        out[i:j] = u - t + h
    return out


def summary_dict(n: int, buckets: dict, wait_ms: dict, delay_ms: dict, total_wait: float, blocked_ns,
                 blocked_batches: int, saving: float) -> dict:
    """The wait summary's dict from its sums (:func:`lotus.analysis.wait.summary_of`; from streams:
    :func:`lotus.analysis.compact.wait_stats`)."""
    return {
        "known": True,
        "batches": n,
        "buckets": buckets,
        "wait_ms": wait_ms,
        "delay_ms": delay_ms,
        "head_of_line": {
            "blocked_ms": float(blocked_ns / MS),
            "blocked_batches": blocked_batches,
            "blocked_share_of_wait": float(blocked_ns / total_wait) if total_wait else 0.0,
            "in_order_false_saving_ms": saving / MS,
            "in_order_false_saving_share": saving / total_wait if total_wait else 0.0,
        },
    }


def sorted_order(cols: dict, sort: str):
    """The row order :func:`sorted_table` gives a table of these numpy columns (stable sorts: the same),
    or None where the rows are in it already."""
    if sort == "duration":
        order = np.argsort(-cols["wait_ms"], kind="stable")  # descending, ties (and NaN last) as sort_values
    else:
        keys = [cols[c] for c in ("batch_id", *reversed(GROUP))]
        n = len(keys[0])
        if n < 2:
            return None
        lt, eq = np.zeros(n - 1, bool), np.ones(n - 1, bool)  # already in key order (ties kept): no order
        for k in reversed(keys):
            lt |= eq & (k[:-1] < k[1:])
            eq &= k[:-1] == k[1:]
        if bool((lt | eq).all()):
            return None
        order = np.lexsort(keys)
    return None if bool((order == np.arange(len(order))).all()) else order


def sorted_table(t, sort: str):
    """:func:`wait_table`'s rows in its order."""
    if sort == "duration":
        return t.sort_values("wait_ms", ascending=False, kind="stable", ignore_index=True)
    return t.sort_values([*GROUP, "batch_id"], kind="stable", ignore_index=True)
