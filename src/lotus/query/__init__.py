"""lotus.query: the query engine over lotus traces (layer 2, above the format :mod:`lotus.trace`).

It turns a run's files into tables: per-batch rows (:func:`load_batches`, from the events of
:func:`lotus.trace.load_events`), or, for runs too large for memory, the out-of-core scan
(:func:`scan_run`: fixed-size chunks, batch columns spilled to disk, exact op streams, the census,
parallel and cluster execution), and second passes over a scanned run's files.

May import: the standard library, numpy/pandas (on first use), :mod:`lotus.trace`, :mod:`lotus.errors`,
:mod:`lotus._names`, :mod:`lotus._env`, :mod:`lotus._warn`. Never :mod:`lotus.analysis`, :mod:`lotus.model`,
:mod:`lotus.map`, :mod:`lotus.live` or the commands (``tests/test_layers.py`` checks it).

This module is the engine's public interface: code outside ``lotus.query`` imports the names below from
``lotus.query`` itself, never from its submodules. Everything is imported lazily::

    from lotus.query import load_batches, scan_run
    batches = load_batches("runs/b256_w4")    # one row per (rank, loader, epoch, batch_id)
"""

from __future__ import annotations

_MODULES = {
    "lotus.query.batches": [
        "BATCH_COLUMNS", "load_batches", "batches_from_events", "consumed_only", "ok_batches", "failed_mask",
        "worker_label",
    ],
    "lotus.query.outcomes": ["fetch_outcomes", "detail_share", "detail_counts", "detail_counts_share",
                             "outcome_summary"],
    "lotus.query.batchtable": ["BatchTable"],
    "lotus.query.rankframes": ["rank_parts", "rank_pieces"],
    "lotus.query.batchparts": ["SUMMARY_COLUMNS"],
    "lotus.query.scan": ["scan_run"],
    "lotus.query.rescan": ["batches_of_scan", "export_events", "op_chunks", "window_scan"],
    "lotus.query.parallel": ["settings", "serial", "map_tasks", "task_count", "jobs",
                             "cluster_address"],
    "lotus.query.scanplan": ["trace_bytes"],
    "lotus.query.spill": ["SpillError", "spill_dir"],
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.query' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
