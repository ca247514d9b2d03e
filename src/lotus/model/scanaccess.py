"""The events the cache what-if reads (:func:`lotus.model.cache.access_epochs`) of a run: for a scanned run
(:mod:`lotus.query.scan`, whose events DataFrame holds no per-sample events), only its ``sample`` and
``load`` events with a known dataset index, read from the trace files in chunks.

:func:`access_events` keeps, of the events that :func:`~lotus.model.cache.access_epochs` can select, the
columns it reads (name, sample, loader, epoch, batch_id, rank, start_ns: 41 bytes an event), in the order
of :func:`lotus.trace.load_events` (the chunks of :func:`lotus.trace.chunks.record_chunks`, as
:mod:`lotus.model.scandetail` reads them): the same rows, values and order, so the same access sequence
(its sort is stable). That is O(samples read over the whole run): ``lotus whatif`` and ``lotus
sensitivity`` no longer use it but :func:`lotus.model.accessorder.access_order`, which keeps only the
simulated epochs' orders (issue 25; the same hit rates); it stays as the reference the tests compare with
and for callers that want every epoch's order."""

from __future__ import annotations

import numpy as np

from lotus.trace import schema as S

_COLUMNS = ("sample", "loader", "epoch", "batch_id", "rank", "start_ns")


def access_events(run):
    """The events of ``run`` (a :class:`lotus.model.observation.RunTrace`) the cache what-if reads: its
    events DataFrame, or for a scanned run its sample and load events of a known index (module doc)."""
    from lotus.analysis.stats import op_engine

    engine = op_engine(run.events)
    return run.events if engine is None else _scanned(engine)


def _scanned(engine):
    import pandas as pd

    from lotus.trace.chunks import record_chunks
    from lotus.trace.events import Accumulator

    acc = Accumulator()
    is_load: list[np.ndarray] = []
    parts: dict[str, list[np.ndarray]] = {c: [] for c in _COLUMNS}
    spans: dict = {}
    for path in engine.paths:
        for arr, code, fs in record_chunks(path, engine.offsets, engine.loader_offsets.get(path, 0), acc.code,
                                           spans=spans):
            m = np.flatnonzero(((code == S.EV_SAMPLE) | (code == S.EV_LOAD)) & (arr["sample"] >= 0))
            if not len(m):
                continue
            is_load.append(code[m] == S.EV_LOAD)
            parts["sample"].append(arr["sample"][m].astype(np.int64))
            parts["loader"].append(arr["loader"][m].astype(np.int64) + fs.loader_offset)
            parts["epoch"].append(arr["epoch"][m].astype(np.int64))
            parts["batch_id"].append(arr["batch_id"][m].astype(np.int64))
            parts["rank"].append(np.full(len(m), int(fs.consts["rank"]), np.int64))
            parts["start_ns"].append(arr["start_ns"][m] + fs.shift)
    cols = {"name": pd.Categorical.from_codes(np.concatenate([np.zeros(0, bool), *is_load]).astype(np.int8),
                                              categories=["sample", "load"])}
    del is_load
    for c in _COLUMNS:
        cols[c] = np.concatenate([np.zeros(0, np.int64), *parts.pop(c)])
    return pd.DataFrame(cols, copy=False)


__all__ = ["access_events"]
