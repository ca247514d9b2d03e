"""Wait, delay and head-of-line blocking of the training loop.

*Wait*: how long the training loop blocked in ``next()`` for each batch (``wait_dur_ns``). Batches are
bucketed: already *buffered* (it had arrived while the loop waited for an earlier one), up to 1 ms
(ready, only the hand-off), over 1 ms, and over 500 ms (a subset of over 1 ms).

*Delay*: ``consumed - end of preprocessing``: how long a prepared batch sat before the loop took it.

*Head-of-line blocking* (in-order delivery, torch's default): while the loop waits for batch *i*, a
later batch *j > i* of the same (rank, loader, epoch) may already be ready. ``hol_blocked`` is the
part of batch *i*'s wait after the first later batch became ready and before batch *i* itself was:
``max(0, min(wait_end_i, ready_i) - max(wait_start_i, min_{j>i} ready_j))``.

*Estimated saving of* ``in_order=False``: with out-of-order delivery the k-th request of the loop gets
the k-th batch to become ready. The model replays the loop of each (rank, loader, epoch): the loop's
own time between two requests (its step) and the hand-off after a batch is ready stay as measured,
batches become ready when they did, and request k is served at ``max(request_k, sorted_ready[k])``
instead of ``max(request_k, ready_k)``. Replaying with the measured order reproduces the measured
waits exactly; the saving is the difference of the total waits. It ignores second-order effects
(earlier consumption also dispatches later batches earlier), so a pipeline whose workers are the
bottleneck shows a small saving even when much of its wait was head-of-line blocked: reordering does
not make the workers faster. ``ready`` is the batch's arrival in the main process (after pinning), or the end
of its preprocessing where no arrival was recorded (original logs).

Runs without wait events (original logs before ``SBatchWait``) have ``known: False``. Failed batches
(the fetch raised) are left out of every number here; exhausted fetches are no batches at all.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.describe import describe_ms
from lotus.analysis.waitcore import GROUP, MS, hol_arrays, sorted_table, summary_dict
from lotus.query import failed_mask

BUCKETS = (("buffered", "already buffered"), ("up_to_1ms", "1 us - 1 ms"), ("over_1ms", "> 1 ms"),
           ("over_500ms", "> 500 ms"))


def _i64(s) -> np.ndarray:
    return s.to_numpy(dtype=np.float64, na_value=np.nan)


_HOL_COLUMNS = [*GROUP, "batch_id", "wait_start_ns", "wait_dur_ns", "arrive_ns", "prep_end_ns"]


def waited(batches, columns: list[str] | None = None):
    """Consumed batches with a known wait, in consumption order per (rank, loader, epoch); only
    ``columns`` (all of them by default), taken in one copy."""
    ok = (batches["wait_dur_ns"].notna() & batches["consumed_ns"].notna()).to_numpy(dtype=bool, na_value=False)
    rows = np.flatnonzero(ok & ~failed_mask(batches))
    # a stable sort by group, then consumption (what sort_values([*GROUP, "consumed_ns"], kind="stable") gives)
    keys = [batches[c].iloc[rows].to_numpy() for c in ("consumed_ns", *reversed(GROUP))]  # no NA left
    rows = rows[np.lexsort(keys)]
    del keys
    cols = slice(None) if columns is None else [batches.columns.get_loc(c) for c in columns]
    return batches.iloc[rows, cols]


def _rel(series, base: int) -> np.ndarray:
    # exact int64 difference first: float64 of an epoch-ns timestamp is only good to 256 ns
    return (series - base).to_numpy(dtype=np.float64, na_value=np.nan)


def ready_ns(batches, base: int = 0) -> np.ndarray:
    """When each batch was ready for the loop, ns after ``base`` (float, NaN if unknown): its arrival
    in the main process (after pinning) where recorded, else the end of preprocessing.

    The main process takes batches off the worker queue only while the loop waits, so an arrival
    can be late only for a batch that was ready before the loop asked for it anyway."""
    arrive = _rel(batches["arrive_ns"], base)
    return np.where(np.isnan(arrive), _rel(batches["prep_end_ns"], base), arrive)


def hol_per_batch(batches, w=None):
    """Per-batch head-of-line blocking and the in_order=False model (DataFrame, ns; see the module doc).
    ``w``: :func:`waited` of ``batches`` (with at least the columns of :data:`_HOL_COLUMNS`), if made."""
    import pandas as pd

    w = waited(batches, _HOL_COLUMNS) if w is None else w
    out = w[[*GROUP, "batch_id"]].copy()
    base = int(w["wait_start_ns"].min()) if len(w) else 0
    ws = _rel(w["wait_start_ns"], base)
    wd = _i64(w["wait_dur_ns"])
    ready = ready_ns(w, base)
    starts = np.flatnonzero(np.r_[True, (w[GROUP].to_numpy()[1:] != w[GROUP].to_numpy()[:-1]).any(axis=1)]) \
        if len(w) else np.array([], int)
    blocked, ooo_wait = hol_arrays(starts, ws, wd, ready)
    out["wait_ns"] = wd
    out["hol_blocked_ns"] = blocked
    out["wait_in_order_false_ns"] = ooo_wait
    return pd.DataFrame(out).reset_index(drop=True)


def wait_buckets(batches, w=None) -> dict[str, float]:
    """Share of waited batches in each bucket (see :data:`BUCKETS`); ``w``: :func:`waited`, if made."""
    w = waited(batches, ["wait_dur_ns", "buffered"]) if w is None else w
    n = len(w)
    if n == 0:
        return {k: 0.0 for k, _ in BUCKETS}
    return _buckets(_i64(w["wait_dur_ns"]), w["buffered"].to_numpy(dtype=bool, na_value=False))


def _buckets(wd: np.ndarray, buf: np.ndarray) -> dict[str, float]:
    n = len(wd)
    return {
        "buffered": float(buf.sum() / n),
        "up_to_1ms": float((~buf & (wd <= MS)).sum() / n),
        "over_1ms": float((~buf & (wd > MS)).sum() / n),
        "over_500ms": float((~buf & (wd > 500 * MS)).sum() / n),
    }


def delay_stats(batches) -> dict:
    """Statistics (ms) of ``delay = consumed - end of preprocessing`` (failed batches left out)."""
    return describe_ms(_i64(batches["delay_ns"])[~failed_mask(batches)])


def wait_stats(batches) -> dict:
    """Wait, delay and head-of-line blocking summary of one run (times in ms, shares in [0, 1]);
    ``batches``: a DataFrame or a scanned run's compact table (:mod:`lotus.analysis.compact`)."""
    from lotus.analysis import compact

    if compact.is_table(batches):
        return compact.wait_stats(batches)
    w = waited(batches, [*_HOL_COLUMNS, "buffered"])  # once: every number below reads it
    consumed = int((batches["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)
                    & ~failed_mask(batches)).sum())
    if len(w) == 0:
        why = ("no main-process wait events (an original log before SBatchWait, or worker files only)"
               if len(batches) else "no batches")
        return {"known": False, "reason": why, "batches": consumed, "delay_ms": delay_stats(batches)}
    hol = hol_per_batch(batches, w)
    return summary_of(hol["wait_ns"].to_numpy(), w["buffered"].to_numpy(dtype=bool, na_value=False),
                      hol["hol_blocked_ns"].to_numpy(), hol["wait_in_order_false_ns"].to_numpy(),
                      delay_stats(batches))


def summary_of(wd: np.ndarray, buf: np.ndarray, blocked: np.ndarray, ooo: np.ndarray, delay_ms: dict) -> dict:
    """:func:`wait_stats` of waited batches (consumption order): wait ns (float), buffered, head-of-line
    blocked ns and wait with in_order=False (:func:`hol_arrays`), and the delay statistics."""
    import pandas as pd

    # Series, not one DataFrame: the same sums, without copying the three columns into one block
    hol = {"wait_ns": pd.Series(wd, copy=False), "hol_blocked_ns": pd.Series(blocked, copy=False),
           "wait_in_order_false_ns": pd.Series(ooo, copy=False)}
    return summary_dict(len(wd), _buckets(wd, buf), describe_ms(wd), delay_ms, float(hol["wait_ns"].sum()),
                        hol["hol_blocked_ns"].sum(), int((hol["hol_blocked_ns"] > 0).sum()),
                        max(0.0, float((hol["wait_ns"] - hol["wait_in_order_false_ns"]).sum())))


def wait_table(batches, *, sort: str = "batch_id"):
    """Per-batch wait/delay rows (ms), sorted by ``batch_id`` (with rank, loader, epoch) or ``duration``."""
    import pandas as pd

    from lotus.analysis import compact

    if compact.is_table(batches):
        return compact.wait_table(batches, sort=sort)
    w = waited(batches, [*_HOL_COLUMNS, "buffered", "worker_id", "delay_ns"])
    hol = hol_per_batch(batches, w)
    t = pd.DataFrame({
        "rank": w["rank"].to_numpy(), "loader": w["loader"].to_numpy(), "epoch": w["epoch"].to_numpy(),
        "batch_id": w["batch_id"].to_numpy(),
        "worker_id": w["worker_id"].to_numpy(dtype=np.float64, na_value=np.nan),
        "wait_ms": _i64(w["wait_dur_ns"]) / MS,
        "buffered": w["buffered"].to_numpy(dtype=bool, na_value=False),
        "delay_ms": _i64(w["delay_ns"]) / MS,
        "hol_blocked_ms": hol["hol_blocked_ns"].to_numpy() / MS,
    })
    return sorted_table(t, sort)
