"""One tuning from start to end over a probe callable and a fit callable (pure: see :mod:`lotus.tune.search`).

1. the baseline: one probe of the job as it is (its own settings); the model is fitted on it;
2. num_workers (:func:`lotus.tune.search.search_workers`);
3. prefetch_factor, pin_memory, persistent_workers (:mod:`lotus.tune.knobs`), in that order, each from the
   best settings so far;
4. a control probe: the setting of the narrowest probe measured again (a process of its own), which widens the
   intervals where the two runs differ beyond them (:mod:`lotus.analysis.runspread`).

The result's ``samples_per_s`` is the measured steady-state rate of the best settings' probe;
``baseline_samples_per_s`` the baseline's, so ``gain`` is measured, not predicted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lotus.tune.knobs import Current, epoch_gain, tune_persistent, tune_pin, tune_prefetch
from lotus.tune.search import Budget, Session, search_workers, worker_candidates
from lotus.tune.types import SETTINGS, LoaderSettings, Measurement, ProbeRecord, TuneError, TuneResult

_log = logging.getLogger("lotus.tune")
CROSS_STEPS = 50  # an epoch-crossing probe: the epoch plus half this many batches, at most 3x this
SHORT_EPOCH_COST = 0.10  # restarting workers costs this share of an epoch: search num_workers with persistent ones


@dataclass
class TuneOptions:
    """How hard to search. Shares are fractions (0.05 = 5 %)."""

    steps: int = 600  # batches per probe at most (its cap)
    precision: float | None = 0.03  # a probe ends once its rate is known to +-this (95%)
    max_seconds: float | None = 90.0  # ... or after this many seconds of batches
    budget_minutes: float | None = 10.0  # no probe starts that would end after this
    max_probes: int = 12  # the baseline included
    max_workers: int | None = None  # largest num_workers tried (default 2x the CPUs per rank)
    tolerance: float = 0.05  # prediction and measurement agree within this
    near_best: float = 0.02  # fewer workers within this of the best are preferred
    min_gain: float = 0.02  # a setting other than the job's own must gain this much (measured)
    only: tuple[str, ...] = SETTINGS  # which settings to tune
    cross_max_steps: int | None = None  # an epoch-crossing probe may have this many steps (default 3x steps)
    control: bool = True  # at the end, the job's own settings measured again (on top of max_probes, within the time)


def run_tuning(probe: Callable[..., Measurement], fit: Callable[[list[Measurement]], object], *, cpus: float,
               options: TuneOptions | None = None, command: list[str] | None = None,
               clock: Callable[[], float] | None = None) -> TuneResult:
    """Tune with ``probe(settings, phase, steps) -> Measurement`` and ``fit(measurements) -> model``."""
    o = options or TuneOptions()
    budget = Budget(o.budget_minutes * 60 if o.budget_minutes is not None else None, o.max_probes,
                    **({"clock": clock} if clock is not None else {}))
    s = Session(probe=probe, fit=fit, cpus=cpus, budget=budget)
    base = s.measure(LoaderSettings(), "baseline", force=True)
    if not base.traced and base.exit_code == 0:
        raise TuneError("the job created no DataLoader: nothing to tune", exit_code=0, trace_dir=base.trace_dir)
    if not base.ok:
        why = "created no DataLoader before it failed" if not base.traced else "failed"
        raise TuneError(f"the job with its own settings {why} (exit code {base.exit_code}): nothing to tune",
                        exit_code=base.exit_code, stderr_tail=base.stderr_tail, trace_dir=base.trace_dir)
    s.ranks = max(base.ranks or 1, 1)
    own = base.effective or LoaderSettings()
    s.entries[0].predicted_samples_per_s = s.rate(own.num_workers or 0, own.prefetch_factor)
    cur = Current(LoaderSettings(), base)
    stopped = "num_workers not tuned"
    predicted = open_ = None
    if "num_workers" in o.only and s.budget.allows(None):
        cands = worker_candidates(s.cpus_per_rank, o.max_workers)
        fixed = _short_epochs(s, base, own) if "persistent_workers" in o.only else LoaderSettings()
        w = search_workers(s, base, candidates=cands, tolerance=o.tolerance, near_best=o.near_best, fixed=fixed)
        stopped, predicted, open_ = w.stopped, w.predicted_samples_per_s, w.unsettled
        best_m = _best_at(s, w.best_workers, fixed) or base
        if best_m is not base and best_m.samples_per_s < base.samples_per_s:  # searched with other settings
            s.notes.append("num_workers: nothing measured faster than the job's own settings: kept")
        elif best_m is not base:
            cur = Current(fixed.with_(num_workers=w.best_workers), best_m)
    gain = None
    if "prefetch_factor" in o.only:
        cur = tune_prefetch(s, cur, tolerance=o.tolerance, near_best=o.near_best, min_gain=o.min_gain)
    if "pin_memory" in o.only:
        cur = tune_pin(s, cur, min_gain=o.min_gain, near_best=o.near_best)
    if "persistent_workers" in o.only:
        short = min(o.steps, CROSS_STEPS)  # an epoch-crossing probe runs a fixed length, not to a precision
        cur, gain = tune_persistent(s, cur, steps=short, cross_max_steps=o.cross_max_steps or 3 * short)
    best = _complete(cur.effective)
    rate, ci, base_rate, base_ci = cur.measurement.samples_per_s, cur.measurement.ci95, base.samples_per_s, base.ci95
    ctl = _control(s) if o.control else None
    if ctl is not None:
        ref = next(e.measurement for e in s.entries if e.name == ctl.first_probe)
        pooled = (ctl.pooled_samples_per_s, tuple(ctl.pooled_ci95))
        rate, ci = pooled if ref is cur.measurement else (rate, _tuple(ctl.widen(rate, ci)))
        base_rate, base_ci = pooled if ref is base else (base_rate, _tuple(ctl.widen(base_rate, base_ci)))
        s.notes.append(ctl.note())
        if cur.measurement is not base and rate < (1 + o.min_gain) * base_rate:
            # a setting other than the job's own must be measured min_gain faster: with the control's mean it is not
            s.notes.append(f"after the control the recommended settings ({rate:,.1f} samples/s) are not measured "
                           f"{o.min_gain:.0%} faster than the job's own ({base_rate:,.1f}): the job's own settings "
                           "are kept")
            cur, best, predicted = Current(LoaderSettings(), base), _complete(own), s.rate(own.num_workers or 0)
            rate, ci = base_rate, base_ci
        elif cur.measurement is not base and ci and base_ci and ci[0] <= base_ci[1]:
            s.notes.append(f"with the run-to-run spread the control showed ({ctl.run_rel_sd:.1%}), the recommended "
                           f"settings ({rate:,.1f} samples/s, {ci[0]:,.1f}-{ci[1]:,.1f}) cannot be told apart from "
                           f"the job's own ({base_rate:,.1f}, {base_ci[0]:,.1f}-{base_ci[1]:,.1f})")
    chk = check_model(s)
    records = [_record(e) for e in s.entries]
    if chk is not None:
        by_name = {c.name: c for c in chk.probes}
        for r in records:
            c = by_name.get(r.name)
            if c is not None:
                r.model_error, r.loo_error, r.disagrees = c.error_before, c.loo_error, c.disagrees
        s.notes.extend(n for n in chk.notes if n not in s.notes)
    return TuneResult(command=list(command or []), best=best, samples_per_s=rate, ci95=ci, baseline_ci95=base_ci,
                      baseline=_complete(own), baseline_samples_per_s=base_rate,
                      predicted_samples_per_s=predicted, probes=records,
                      model_check=chk.to_dict() if chk is not None else None,
                      seconds=budget.elapsed_s, stopped=stopped, cpus=round(cpus), notes=list(s.notes),
                      epoch_gain=gain, unsettled_workers=open_, control=ctl.to_dict() if ctl is not None else None)


def _control(s: Session):
    """The search's probe with the narrowest interval for its rate (:func:`lotus.analysis.runspread.control_choice`;
    an epoch-crossing probe, of fixed length, aside) measured again now with the same settings, when the time left
    allows it (:class:`lotus.analysis.runspread.Control`); None, with a note, when it cannot be."""
    from lotus.analysis.runspread import Reading, control_check, control_choice

    b = s.budget
    if b.seconds is not None and b.seconds - b.elapsed_s < (s.expected_s() or 0.0):
        s.notes.append("no control probe: the time budget is spent (--no-control to skip it)")
        return None
    done = [e for e in s.entries if e.measurement.ok and e.phase != "persistent_workers"]
    readings = [Reading(e.name, e.measurement.samples_per_s, e.measurement.ci95, e.measurement.within_rel_halfwidth,
                        e.measurement.started_unix_s) for e in done]
    k = control_choice(readings)
    if k is None:
        return None
    ref = done[k].measurement
    m = s.measure(ref.settings, "control", force=True)
    name = s.entries[-1].name
    if not m.ok:
        s.notes.append(f"the control probe {name} failed (exit code {m.exit_code}); the rates stand as measured")
        return None
    again = Reading(name, m.samples_per_s, m.ci95, m.within_rel_halfwidth, m.started_unix_s)
    forced = ", ".join(f"{key}={v}" for key, v in ref.settings.to_dict().items() if v is not None)
    what = forced or "the job's own settings"
    return control_check(readings[k], again, f"{what} ({done[k].name})")


def _tuple(v):
    return tuple(v) if v else None


def check_model(s: Session):
    """Every probe of the worker search against the model (:mod:`lotus.model.check`): the prediction made
    before it and the leave-one-probe-out error; None before two successful probes."""
    from lotus.model.check import Probe, check_probes

    fixed = [e for e in s.entries if e.phase in ("baseline", "num_workers") and e.measurement.ok]
    if len(fixed) < 2:
        return None
    probes = []
    for e in fixed:
        m = e.measurement
        w = m.settings.over(m.effective or LoaderSettings()).num_workers or 0
        probes.append(Probe(e.name, m, m.samples_per_s, m.ci95, (w, m.settings.with_(num_workers=None)),
                            e.predicted_samples_per_s, m.note))

    def predict(model, key):
        w, rest = key
        p = model.predict(w, s.cpus_per_rank, prefetch_factor=rest.prefetch_factor)
        return p.samples_per_s * max(s.ranks, 1) if p is not None and p.samples_per_s else None

    return check_probes(probes, lambda ms: s.fit(list(ms)), predict)


def _short_epochs(s: Session, base: Measurement, own: LoaderSettings) -> LoaderSettings:
    """persistent_workers=True for the worker search when restarting workers costs SHORT_EPOCH_COST or more
    of an epoch (the baseline crossed an epoch boundary): else worker counts would be judged mostly by their
    start-up."""
    ep = base.epochs
    if own.persistent_workers or not own.num_workers or not ep.epochs_crossed or ep.boundary_extra_s is None \
            or not ep.batches_per_epoch or not ep.batch_interval_s:
        return LoaderSettings()
    share = epoch_gain(ep.boundary_extra_s, 0.0, ep.batches_per_epoch * ep.batch_interval_s)
    if share < SHORT_EPOCH_COST:
        return LoaderSettings()
    s.notes.append(f"num_workers: searched with persistent_workers=True: restarting the workers costs {share:.0%} "
                   f"of an epoch of {ep.batches_per_epoch} batches")
    return LoaderSettings(persistent_workers=True)


def _best_at(s: Session, workers: int, fixed: LoaderSettings) -> Measurement | None:
    """The best successful measurement of the worker search (or the baseline) at ``workers``."""
    ms = [e.measurement for e in s.entries if e.phase in ("baseline", "num_workers") and e.measurement.ok
          and e.measurement.settings.with_(num_workers=None) == fixed.with_(num_workers=None)
          and e.measurement.settings.over(e.measurement.effective or LoaderSettings()).num_workers == workers]
    return max(ms, key=lambda m: m.samples_per_s) if ms else None


def _complete(x: LoaderSettings) -> LoaderSettings:
    """Every setting given: torch's defaults where the trace did not say."""
    w = x.num_workers or 0
    return LoaderSettings(num_workers=w, prefetch_factor=(x.prefetch_factor or 2) if w else None,
                          pin_memory=bool(x.pin_memory), persistent_workers=bool(x.persistent_workers) if w else False)


def _record(e) -> ProbeRecord:
    m = e.measurement
    eff = m.settings.over(m.effective) if m.effective is not None else m.settings
    return ProbeRecord(name=e.name, phase=e.phase, settings=eff.to_dict(),
                       forced={k: v for k, v in m.settings.to_dict().items() if v is not None},
                       samples_per_s=m.samples_per_s, predicted_samples_per_s=e.predicted_samples_per_s,
                       wait_share=m.wait_share, wall_s=m.wall_s, exit_code=m.exit_code, failed=not m.ok,
                       steps=m.steps, trace_dir=m.trace_dir, stderr_tail="" if m.ok else m.stderr_tail,
                       ci95=list(m.ci95) if m.ci95 else None, stopped_by=m.stopped_by, note=m.note,
                       in_series=m.in_series)


__all__ = ["TuneOptions", "run_tuning"]
