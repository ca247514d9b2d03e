"""lotus.model: trace DataFrames -> fitted throughput model -> predict(workers, cpus, batch, cache).

    from lotus.model import fit, load_run
    model = fit(load_run("runs/b256_w4"))            # or fit([run_a, run_b, cold_probe])
    model.predict(num_workers=8, cpus=8)             # Prediction(samples_per_s, wait_share, bottleneck...)
    from lotus.model import cache_hit_rates, access_epochs
    hits = cache_hit_rates(access_epochs(events), dataset_len, n_epochs=3)   # LRU and static cache

Pure numpy/pandas, no torch; imports nothing heavy until used. Tuning, sensitivity profiling, dispatch
and power planning ask this package for predictions instead of fitting curves of their own.
See docs/model.md.

Layer 4 (model, above :mod:`lotus.analysis`): may import the analysis, the engine (:mod:`lotus.query`
itself), the format and :mod:`lotus.sim`; never the commands (see docs/architecture.md).
"""

from __future__ import annotations

_MODULES = {
    "lotus.model.params": ["Dist", "Measured", "PipelineModel", "Prediction", "RunSummary"],
    "lotus.model.observation": ["RunTrace", "observe"],
    "lotus.model.fitting": ["as_run", "fit", "load_run"],
    "lotus.model.engine": ["predict"],
    "lotus.model.accessorder": ["AccessOrder", "access_order"],
    "lotus.model.cache": ["access_epochs", "cache_hit_rates", "extend_epochs", "lru_distances", "sampler_kind",
                          "static_thresholds", "steady_hit_rates"],
    "lotus.model.tables": ["cache_hits", "cache_throughput", "dataset_bytes_of", "default_grid", "hit_rate_at",
                           "prediction_table"],
    "lotus.model.report": ["WhatIf", "whatif"],
    "lotus.model.plots": ["cache_figure"],
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AccessOrder", "Dist", "Measured", "PipelineModel", "Prediction", "RunSummary", "RunTrace", "WhatIf",
    "access_epochs", "access_order",
    "as_run", "cache_figure", "cache_hit_rates", "cache_hits", "cache_throughput", "dataset_bytes_of",
    "default_grid", "extend_epochs", "fit", "hit_rate_at", "load_run", "lru_distances", "observe", "predict",
    "prediction_table", "sampler_kind", "static_thresholds", "steady_hit_rates", "whatif",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.model' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
