"""lotus.trace: the trace format (layer 1, the lowest): its schema, writer and readers.

The schema (:mod:`.schema`), the per-process writer (:mod:`.writer`) and its files' header
(:mod:`.header`), packed records (:mod:`.packed`),
rotated and compressed parts (:mod:`.parts`), lotus's own files (:mod:`.native`), the original
LotusTrace text logs (:mod:`.original`), finding runs (:mod:`.discover`), reading a run's events
(:mod:`.events`), compacting a finished run (:mod:`.compact`) and the synthetic writers
(:mod:`.synthetic`, :mod:`.simulated`).

May import: the standard library, numpy/pandas (on first use), :mod:`lotus.errors`, :mod:`lotus._names`,
:mod:`lotus._warn`, :mod:`lotus.sim` (the DataLoader simulator of the synthetic writers). Never the
query engine :mod:`lotus.query` or anything above it (``tests/test_layers.py`` checks it).

Readers return pandas DataFrames; pandas and numpy are imported on first use::

    from lotus.trace import load_events
    from lotus.query import load_batches
    events = load_events("runs/b256_w4")      # one row per event
    batches = load_batches("runs/b256_w4")    # one row per (rank, loader, epoch, batch_id)
"""

from __future__ import annotations

_LAZY = {
    "load_events": "lotus.trace.events",
    "events_of_run": "lotus.trace.events",
    "EVENT_COLUMNS": "lotus.trace.events",
    "find_runs": "lotus.trace.discover",
    "find_run": "lotus.trace.discover",
    "Run": "lotus.trace.discover",
    "read_trace_file": "lotus.trace.native",
    "read_original_log": "lotus.trace.original",
    "TraceWriter": "lotus.trace.writer",
}
# Per-batch tables are the query engine's (issue 25): say where they went.
_MOVED = {"load_batches", "batches_from_events", "consumed_only", "ok_batches", "fetch_outcomes",
          "detail_share", "outcome_summary", "BATCH_COLUMNS"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        if name in _MOVED:
            raise AttributeError(f"lotus.trace.{name} is now lotus.query.{name}: from lotus.query import {name}")
        raise AttributeError(f"module 'lotus.trace' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
