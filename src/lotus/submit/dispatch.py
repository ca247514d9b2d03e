"""``submit``: apps -> (profiling probes) -> plan -> executor -> results table and report.

Nothing here starts a process itself: the executors run :func:`lotus.launch.launch`, the curves come
from :mod:`lotus.model` (:mod:`lotus.submit.curves`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus.submit.apps import AppSpec
from lotus.submit.curves import CurveUnavailable, fit_curve
from lotus.submit.local import Interrupted
from lotus.submit.plan import Plan, PlanOptions, build_plan, probe_specs
from lotus.submit.results import AppResult, collect, write_report

_log = logging.getLogger("lotus.submit")
RESULTS_FILE = "submit.json"


@dataclass
class SubmitResult:
    plan: Plan
    results: list[AppResult]
    interrupted: bool = False
    report: Path | None = None
    results_file: Path | None = None
    probes: list[dict] = field(default_factory=list)
    trial: dict | None = None  # concurrent workers=auto: the side-by-side trials (lotus.submit.trial)

    @property
    def failed(self) -> list[AppResult]:
        return [r for r in self.results if r.status != "ok"]

    def to_dict(self) -> dict:
        return {"plan": self.plan.to_dict(), "apps": [r.to_dict() for r in self.results],
                "interrupted": self.interrupted, "report": None if self.report is None else str(self.report),
                "probes": self.probes, "trial": self.trial}


def known_curves(apps: list[AppSpec]) -> dict:
    """Curves of the auto apps that name a ``profile`` trace (no probe needed)."""
    out = {}
    for a in apps:
        if a.workers_auto and a.profile:
            try:
                out[a.name] = fit_curve(a.profile, a.ranks)
            except CurveUnavailable as exc:
                _log.warning("%s: %s; its CPUs are an equal share", a.name, exc)
    return out


def plan_apps(apps: list[AppSpec], options: PlanOptions, executor=None) -> tuple[Plan, list[dict]]:
    """The plan; with an executor, the auto apps without a curve are probed first (``probe_steps``
    batches each, one after the other) and sized from the model fitted on their probes."""
    curves = known_curves(apps)
    plan = build_plan(apps, options, curves)
    specs = probe_specs(plan, options.probe_steps, have=set(curves), precision=options.probe_precision,
                        max_seconds=options.probe_max_seconds)
    if executor is None or not specs:
        return plan, []
    ranks = {p.name: p.ranks for p in plan.apps}
    _log.info("workers=auto: profiling %d app(s), %d batches each", len(specs), options.probe_steps)
    outcomes = executor.run(specs, concurrent=False)
    probes = []
    for spec, o in zip(specs, outcomes, strict=True):
        probes.append({"name": spec.name, "trace_dir": spec.trace_dir, "exit_code": o.exit_code,
                       "samples_per_s": o.samples_per_s, "ci95": o.ci95, "stopped_by": o.stopped_by, "note": o.note,
                       "workers": spec.workers, "cpus": len(spec.cpus or ()), "wall_s": o.wall_s,
                       "stderr_tail": o.stderr_tail if o.exit_code else ""})
        if not (o.ok and o.traced):
            _log.warning("%s: profiling probe gave no trace (exit code %s); its CPUs are an equal share",
                         spec.name, o.exit_code)
            continue
        try:
            curves[spec.name] = fit_curve(spec.trace_dir, ranks[spec.name])
        except CurveUnavailable as exc:
            _log.warning("%s: %s; its CPUs are an equal share", spec.name, exc)
    plan = build_plan(apps, options, curves)
    missing = [p.name for p in plan.apps if p.app.workers_auto and "provisional" in p.cpus_source]
    for p in plan.apps:
        if p.name in missing:
            p.cpus_source = "equal split"
    return plan, probes


def wants_trial(plan: Plan) -> bool:
    """Concurrent apps, trials asked for, and at least one auto app sized by the model onto a CPU set."""
    return bool(plan.concurrent and plan.options.trial_s > 0 and
                any(p.app.workers_auto and p.app.cpus is None and p.cpus and p.cpus_source == "model"
                    for p in plan.apps))


def submit(apps: list[AppSpec], options: PlanOptions, executor, *, report: bool = True,
           figures: bool = True) -> SubmitResult:
    """Profile (workers=auto), plan, run every app with ``executor``, collect the table and the report.

    Ctrl-C: every started app is stopped (by the executor), the result says ``interrupted`` and holds
    what each app gave; no report is written then (the traces are kept: ``lotus report`` them later).
    """
    t0 = time.time()
    plan, probes, outcomes, trial = None, [], None, None
    try:
        plan, probes = plan_apps(apps, options, executor)
        if wants_trial(plan) and getattr(executor, "name", "") == "local":
            from lotus.submit.trial import run_trials, startup_s

            plan, trial = run_trials(plan, executor, options.trial_s, curves=plan.curves, start_s=startup_s(probes),
                                     refine=options.refine)
        specs = [p.spec() for p in plan.apps]
        for p in plan.apps:
            _log.info("%s: %s", p.name, " ".join(p.command))
        t0 = time.time()
        outcomes = []  # from here on, an interruption is the apps'
        outcomes = executor.run(specs, concurrent=plan.concurrent, delays_s=[p.delay_s for p in plan.apps])
        interrupted = False
    except Interrupted as exc:
        interrupted = True
        if outcomes is None:  # during the profiling probes: no app started
            plan = plan or build_plan(apps, options)
            outcomes = [None] * len(plan.apps)
        else:
            outcomes = exc.outcomes
    results, configs = collect(plan.apps, outcomes, t0, interrupted, slurm=getattr(executor, "name", "") == "slurm")
    out = SubmitResult(plan=plan, results=results, interrupted=interrupted, probes=probes, trial=trial)
    if report and not interrupted:
        try:
            paths = write_report(configs, options.out_dir, figures=figures)
            out.report = paths[0] if paths else None
        except Exception as exc:  # the table matters more than the figures
            _log.warning("the report could not be written: %s", exc)
    out.results_file = options.out_dir / RESULTS_FILE
    try:
        from lotus.analysis.jsonutil import dumps

        options.out_dir.mkdir(parents=True, exist_ok=True)
        out.results_file.write_text(dumps(out.to_dict()))
    except (OSError, TypeError, ValueError) as exc:
        _log.warning("cannot write %s: %s", out.results_file, exc)
        out.results_file = None
    return out

