"""lotus.submit: run many training apps from a CSV (torchloader's dispatcher), one after another or side
by side, locally or as Slurm jobs, each traced by :mod:`lotus.launch`; ``workers=auto`` apps get disjoint
CPU sets sized from :mod:`lotus.model` predictions (greedy by marginal throughput, as Synergy does).

    from lotus.submit import read_apps, PlanOptions, plan_apps, submit, LocalExecutor
    apps = read_apps("apps.csv")                                   # AppsError: one line, row and column
    result = submit(apps, PlanOptions(out_dir=Path("out"), concurrent=True), LocalExecutor())
    result.results                                                 # AppResult per app

    from lotus.submit import allocate                              # pure: curves -> CPUs per app
    allocate({"a": curve_a, "b": curve_b}, total_cpus=16)

See docs/submit.md.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

_EXPORTS = {
    "AppSpec": "lotus.submit.apps", "AppsError": "lotus.submit.apps", "read_apps": "lotus.submit.apps",
    "allocate": "lotus.submit.allocator", "contiguous_sets": "lotus.submit.allocator",
    "equal_split": "lotus.submit.allocator", "AllocationError": "lotus.submit.allocator",
    "fit_curve": "lotus.submit.curves", "CurveUnavailable": "lotus.submit.curves",
    "LaunchSpec": "lotus.submit.jobs", "Outcome": "lotus.submit.jobs", "run_spec": "lotus.submit.jobs",
    "LocalExecutor": "lotus.submit.local", "Interrupted": "lotus.submit.local",
    "SlurmExecutor": "lotus.submit.slurm", "SlurmUnavailable": "lotus.submit.slurm",
    "Plan": "lotus.submit.plan", "PlanOptions": "lotus.submit.plan", "AppPlan": "lotus.submit.plan",
    "build_plan": "lotus.submit.plan", "find_trainer": "lotus.submit.plan",
    "AppResult": "lotus.submit.results", "SubmitResult": "lotus.submit.dispatch",
    "plan_apps": "lotus.submit.dispatch", "submit": "lotus.submit.dispatch",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy exports above


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.submit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
