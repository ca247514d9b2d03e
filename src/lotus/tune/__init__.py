"""lotus.tune: the DataLoader settings that maximise samples/s (``lotus tune``); the model proposes, probes verify.

    from lotus.tune import tune
    result = tune(["python", "train.py"], steps=50, budget_minutes=10)
    result.best.snippet()          # 'DataLoader(..., num_workers=6, prefetch_factor=2, ...)'
    result.samples_per_s, result.baseline_samples_per_s, result.probes

num_workers first, then prefetch_factor, pin_memory and persistent_workers. Probes go through
:func:`lotus.launch.launch`, predictions come from :func:`lotus.model.fit`; the search itself
(:mod:`lotus.tune.search`, :mod:`lotus.tune.knobs`, :func:`lotus.tune.core.run_tuning`) is pure over a
``probe`` and a ``fit`` callable, so it is tested with fakes of known truth. See docs/tune.md.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

_MODULES = {
    "lotus.tune.types": ["EpochFacts", "LoaderSettings", "Measurement", "ProbeRecord", "TuneError", "TuneResult"],
    "lotus.tune.search": ["Budget", "Session", "search_workers", "worker_candidates"],
    "lotus.tune.core": ["TuneOptions", "run_tuning"],
    "lotus.tune.tuner": ["tune"],
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = ["Budget", "EpochFacts", "LoaderSettings", "Measurement", "ProbeRecord", "Session", "TuneError",
           "TuneOptions", "TuneResult", "run_tuning", "search_workers", "tune", "worker_candidates"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.tune' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
