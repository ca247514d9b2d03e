"""Per-op durations of a scanned run (:mod:`lotus.query.scan`) for ``lotus plot``, read again from its
files in chunks: the figure data of :func:`lotus.analysis.plotdata.op_frame` and
:func:`~lotus.analysis.plotdata.op_seconds_frame`, equal to the in-memory path's.

In memory, an op's durations ``d`` are :func:`lotus.analysis.stats.op_durations` (events order, the ops
of failed and exhausted fetches left out) and the figure draws ``rng.choice(d, k, replace=False)``
when there are more than ``k``. numpy's ``Generator.choice`` draws its indices from ``len(d)`` and the
generator's state alone, then returns ``d.take(idx)``: ``rng.choice(len(d), k, replace=False)`` gives
the same indices and leaves the generator in the same state. So, knowing each op's count, the indices
are drawn first and the values picked during one pass over the files (:func:`op_chunks`: the
chunks in file order, the DataFrame's, with the excluded batches' ops marked). Counts and integer sums
per op come from that pass; the counts before it are the scan's own (its moments) when there is
nothing to exclude, else one more counting pass. Memory: at most ``k`` values per op, plus a chunk.

A scan that kept its op records (:mod:`lotus.query.opreduce`, ``lotus report`` and ``lotus plot``) needs
no pass at all: the counts are its moments' where the excluded batches hold no op record (its per-batch
counts say so), and the values are picked from the op durations it wrote to temporary files, in the same
file order.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.stats import _excluded_keys, op_engine

EXACT = 1 << 53  # float sums of integers below this are exact


def _exclusion_key(keys) -> bytes:
    if keys is None or not len(keys):
        return b""
    a = keys[["rank", "loader", "epoch", "batch_id"]].drop_duplicates().to_numpy(np.int64)
    return a[np.lexsort(a.T[::-1])].tobytes()


def _cache(engine) -> dict:
    c = engine.__dict__.get("plot_totals")
    if c is None:
        c = engine.__dict__["plot_totals"] = {}
    return c


def _pass(engine, keys, picks: dict[int, np.ndarray] | None = None):
    """One pass over the files: per op slot, the count and integer sum of the ops kept (outside ``keys``)
    and, for the slots of ``picks`` ({slot: indices into that op's kept durations}), the values there."""
    from lotus.query import op_chunks

    slots = len(engine.slot_codes)
    seen = np.zeros(slots, np.int64)
    sums = [0] * slots
    plan = {k: (np.argsort(i, kind="stable"), np.sort(i)) for k, i in (picks or {}).items()}
    out = {k: np.empty(len(i), np.int64) for k, i in (picks or {}).items()}
    for arr, slot, keep, _fs in op_chunks(engine, keys):
        ki = np.flatnonzero(keep)
        if not ki.size:
            continue
        sl = slot[ki]
        o = np.argsort(sl, kind="stable")  # by op, file order within each
        sl, d = sl[o], arr["dur_ns"][ki[o]]
        cut = np.flatnonzero(sl[1:] != sl[:-1]) + 1
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(sl)].tolist(), strict=True):
            k, base, part = int(sl[a]), int(seen[int(sl[a])]), d[a:b]
            sums[k] += int(part.sum())
            if k in plan:
                order, want = plan[k]
                lo, hi = np.searchsorted(want, [base, base + len(part)])
                out[k][order[lo:hi]] = part[want[lo:hi] - base]
            seen[k] += len(part)
    return seen, sums, out


def _no_ops_in(engine, keys) -> bool:
    """Whether the scan's per-batch op counts (:mod:`lotus.query.opreduce`) show no op record in ``keys``."""
    reduce = getattr(engine, "op_reduce", None)
    return reduce is not None and reduce.ops_of(keys) == 0


def kept_totals(events) -> dict[str, tuple[int, int]]:
    """``{op: (count, sum ns)}`` in pipeline order, the ops of failed and exhausted fetches left out
    (exact integers): from the scan's moments when nothing is excluded (or the excluded batches hold no
    op record) and their float sums are exact, else one pass over the files (cached on the engine)."""
    engine = op_engine(events)
    keys = _excluded_keys(events, None)
    if keys is not None and len(keys) and _no_ops_in(engine, keys):
        keys = None
    cache = _cache(engine)
    ck = _exclusion_key(keys)
    if ck not in cache:
        m = engine.moments
        slots = len(engine.slot_codes)
        m.grow(slots)
        if not ck and bool(np.all((m.n == 0) | ((m.lo >= 0) & (m.total < EXACT)))):
            cache[ck] = (m.n.copy(), [int(t) for t in m.total])
        else:
            cache[ck] = _pass(engine, keys)[:2]
    n, sums = cache[ck]
    slot = {engine.names[c]: k for k, c in enumerate(engine.slot_codes)}
    return {op: (int(n[slot[op]]), int(sums[slot[op]])) for op in engine.op_order()}


def op_samples(events, rng: np.random.Generator, max_per_op: int) -> dict[str, np.ndarray]:
    """``{op: durations (int64 ns)}`` in pipeline order: every kept duration of an op with at most
    ``max_per_op``, else the ones ``rng.choice(d, max_per_op, replace=False)`` would give (in its
    order; ``rng`` advanced as it would be)."""
    engine = op_engine(events)
    counts = kept_totals(events)
    slot = {engine.names[c]: k for k, c in enumerate(engine.slot_codes)}
    picks = {}
    for op, (n, _) in counts.items():
        if n > max_per_op:
            picks[slot[op]] = rng.choice(n, max_per_op, replace=False)
        else:
            picks[slot[op]] = np.arange(n, dtype=np.int64)
    keys = _excluded_keys(events, None)
    values = getattr(getattr(engine, "op_reduce", None), "values", None)
    if values is not None and (keys is None or not len(keys) or _no_ops_in(engine, keys)):
        for op, (n, _) in counts.items():  # the scan kept every op duration: no pass over the files
            if values.count(slot[op]) != n:
                raise RuntimeError(f"{op}: {values.count(slot[op])} op durations kept, {n} counted")
        return {op: values.pick(slot[op], picks[slot[op]]) for op in counts}
    seen, sums, out = _pass(engine, keys, picks)
    for op, (n, total) in counts.items():
        if int(seen[slot[op]]) != n or sums[slot[op]] != total:  # the files changed since the scan
            raise RuntimeError(f"{op}: {int(seen[slot[op]])} ops in the files, {n} when scanned")
    return {op: out[slot[op]] for op in counts}
