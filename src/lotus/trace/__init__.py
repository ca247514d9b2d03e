"""lotus.trace: the trace format, its writer and its readers (lotus traces and original LotusTrace logs).

Readers return pandas DataFrames; pandas and numpy are imported on first use::

    from lotus.trace import load_events, load_batches
    events = load_events("runs/b256_w4")      # one row per event
    batches = load_batches("runs/b256_w4")    # one row per (rank, loader, epoch, batch_id)
"""

from __future__ import annotations

_LAZY = {
    "load_events": "lotus.trace.events",
    "events_of_run": "lotus.trace.events",
    "EVENT_COLUMNS": "lotus.trace.events",
    "load_batches": "lotus.trace.batches",
    "batches_from_events": "lotus.trace.batches",
    "consumed_only": "lotus.trace.batches",
    "ok_batches": "lotus.trace.batches",
    "fetch_outcomes": "lotus.trace.batches",
    "detail_share": "lotus.trace.batches",
    "outcome_summary": "lotus.trace.batches",
    "BATCH_COLUMNS": "lotus.trace.batches",
    "find_runs": "lotus.trace.discover",
    "find_run": "lotus.trace.discover",
    "Run": "lotus.trace.discover",
    "read_trace_file": "lotus.trace.native",
    "read_original_log": "lotus.trace.original",
    "TraceWriter": "lotus.trace.writer",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.trace' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
