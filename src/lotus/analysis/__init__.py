"""lotus.analysis: pure functions from the trace DataFrames to numbers, tables and figures.

Everything is imported lazily (pandas, numpy and matplotlib on first use); torch never::

    from lotus.trace import load_events
    from lotus.query import batches_from_events
    from lotus.analysis import preprocessing_stats, op_stats, wait_stats, verdict
    events = load_events("runs/b256_w4")
    batches = batches_from_events(events)
    preprocessing_stats(batches)          # {"count", "mean", "std", "p90", ...} in ms
    op_stats(events)                      # {op: {...}} per call, in ms
    wait_stats(batches)                   # wait buckets, delay, head-of-line blocking
    verdict(events, batches)              # class, wait share, slowest op, workers, suggestions

Layer 3 (measures, above the engine): pure functions over the engine's tables; the steady-state
rate (:mod:`.steady`) and the window rule (:mod:`.windowrate`) are here, with the throughput analysis.
May import :mod:`lotus.query` (its ``__init__`` only), :mod:`lotus.trace` and the leaves (:mod:`lotus.errors`,
:mod:`lotus._names`...); never the model, the features or the commands (``tests/test_layers.py``).
"""

from __future__ import annotations

_LAZY = {
    # runs
    "Config": "lotus.analysis.runs",
    "load_configs": "lotus.analysis.runs",
    "iter_configs": "lotus.analysis.runs",
    "load_config": "lotus.analysis.runs",
    "config_from_events": "lotus.analysis.runs",
    # statistics
    "STAT_KEYS": "lotus.analysis.stats",
    "describe_ms": "lotus.analysis.stats",
    "preprocessing_stats": "lotus.analysis.stats",
    "op_stats": "lotus.analysis.stats",
    "op_names": "lotus.analysis.stats",
    "op_durations": "lotus.analysis.stats",
    "op_totals_s": "lotus.analysis.stats",
    "config_stats": "lotus.analysis.stats",
    "stats_table": "lotus.analysis.stats",
    "split_outliers": "lotus.analysis.stats",
    # wait
    "wait_stats": "lotus.analysis.wait",
    "wait_table": "lotus.analysis.wait",
    "wait_buckets": "lotus.analysis.wait",
    "hol_per_batch": "lotus.analysis.wait",
    "delay_stats": "lotus.analysis.wait",
    # verdict
    "verdict": "lotus.analysis.diagnosis",
    "classify": "lotus.analysis.diagnosis",
    "loop_spans": "lotus.analysis.diagnosis",
    "worker_utilisation": "lotus.analysis.diagnosis",
    "slowest_ops": "lotus.analysis.diagnosis",
    # ranks and nodes: stragglers
    "rank_report": "lotus.analysis.ranks",
    "step_table": "lotus.analysis.collective",
    # diff, info, export
    "diff_runs": "lotus.analysis.diff",
    "batch_changes": "lotus.analysis.diff",
    "run_info": "lotus.analysis.info",
    "outcome_note": "lotus.analysis.info",
    "export_parquet": "lotus.analysis.export",
    # outputs
    "write_chrome_trace": "lotus.analysis.chrome",
    "build_report": "lotus.analysis.report",
    "render_html": "lotus.analysis.report",
    "write_report": "lotus.analysis.report",
    "all_figures": "lotus.analysis.plots",
    "save_figure": "lotus.analysis.plots",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.analysis' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
