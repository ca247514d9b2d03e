"""What the model reads of a run's per-sample and op events, per batch of its main loader (:class:`Detail`).

:func:`detail_of_events` computes it from the events DataFrame (every event in memory: the path of runs
below the scan threshold); :func:`lotus.model.scandetail.detail_of_scan` computes the same values from the
trace files in chunks, for a run read by the out-of-core engine (:mod:`lotus.query.scan`), whose events
DataFrame holds no per-sample events.

Events are matched to the batches on (rank, epoch, batch_id) packed as :func:`batch_keys` packs them,
among the events of the main loader only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NOT_OPS = {"sample", "transform"}  # per-sample spans, not ops of their own (lotus.analysis.stats.op_names)


def batch_keys(rank, epoch, batch) -> np.ndarray:
    return (np.asarray(rank, np.int64) << 52) | (np.asarray(epoch, np.int64) << 32) | np.asarray(batch, np.int64)


@dataclass
class Detail:
    """Per batch (the rows of the batches the events were matched to): sums and counts of the per-sample
    events' durations (ns; None where the loader has no event of that kind); every op's durations
    (ns, in the events DataFrame's order: an array, or a :class:`lotus.analysis.exactstats.Floats`
    stream on the scan path); the dispatch durations; first reads per batch and the re-read means
    (:func:`lotus.model.measures.rereads`)."""

    sample_sum: np.ndarray | None
    sample_count: np.ndarray | None
    load_sum: np.ndarray | None
    load_count: np.ndarray | None
    transform_sum: np.ndarray | None
    op_ns: dict = field(default_factory=dict)
    dispatch_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    first_reads: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reread: tuple[float, float, int, int] | None = None


def detail_of_events(ev, keys: np.ndarray) -> Detail:
    """:class:`Detail` of the events DataFrame ``ev`` (the main loader's events) for the batches of
    ``keys`` (:func:`batch_keys` of the batches' rows)."""
    from lotus.analysis.stats import op_names
    from lotus.model import measures

    nb = len(keys)
    order = np.argsort(keys)
    codes = np.asarray(ev["name"].array.codes)
    labels = {str(c): i for i, c in enumerate(ev["name"].array.categories)}
    ekeys = batch_keys(ev["rank"].to_numpy(), ev["epoch"].to_numpy(), ev["batch_id"].to_numpy())
    dur = ev["dur_ns"].to_numpy()

    def rows(name):
        code = labels.get(name)
        if code is None:
            return None, None
        m = np.flatnonzero(codes == code)
        if m.size == 0:
            return None, None
        pos = np.searchsorted(keys, ekeys[m], sorter=order).clip(0, nb - 1)
        row = order[pos]
        ok = keys[row] == ekeys[m]
        return m[ok], row[ok]

    def per_batch(name):
        m, row = rows(name)
        if m is None:
            return None, None
        return (np.bincount(row, weights=dur[m], minlength=nb),
                np.bincount(row, minlength=nb))

    s_sum, s_cnt = per_batch("sample")
    l_sum, l_cnt = per_batch("load")
    t_sum, _ = per_batch("transform")
    op_ns = {}
    for name in op_names(ev):
        if name in NOT_OPS:
            continue
        m, _row = rows(name)
        if m is not None:
            op_ns[name] = dur[m].astype(np.float64)
    m, _ = rows("dispatch")
    dispatch = dur[m].astype(np.float64) if m is not None else np.zeros(0)
    first_reads, reread = measures.rereads(ev, rows, dur, nb)
    return Detail(s_sum, s_cnt, l_sum, l_cnt, t_sum, op_ns, dispatch, first_reads, reread)


def detail_events(run):
    """Every event of the run of ``run`` (a :class:`lotus.model.observation.RunTrace`), per-sample ones
    included: its events DataFrame, or for a scanned run the files read again in memory (the cache
    what-if needs the order of every sample read)."""
    from lotus.analysis.stats import op_engine

    ev = run.events
    if op_engine(ev) is None:
        return ev
    import logging

    from lotus.trace.discover import find_run
    from lotus.trace.events import events_of_run

    logging.getLogger("lotus.model").info("%s: reading every event in memory for the sample order", run.name)
    return events_of_run(find_run(ev.attrs["path"]))


__all__ = ["NOT_OPS", "Detail", "batch_keys", "detail_events", "detail_of_events"]
