"""Every probe checks the model: the prediction made before the probe, leave-one-probe-out errors, and the
prediction interval they give (pure: no processes; fitting and predicting are callables).

A *probe* here is one measured configuration of the job (a traced run with its steady rate and 95%
interval). For probes ``p_1..p_n`` (in the order they ran):

* ``predicted_before``: what the model fitted on ``p_1..p_{i-1}`` predicted for ``p_i`` (recorded by the
  caller when it chose the probe; :func:`check_probes` takes it as given);
* ``loo``: the model fitted on every probe but ``p_i``, predicting ``p_i`` (leave one probe out);
* a probe *disagrees* with the model when the relative error exceeds its own interval's half-width plus
  :data:`SLACK` (10%): the measurement cannot explain the gap.

The model *holds* for the job when no probe's leave-one-out error disagrees (and, with one probe only, when
its own self-prediction does). Its prediction interval for unmeasured configurations is the largest
leave-one-out error (at least :data:`MIN_PI`): with a handful of probes the maximum is the honest quantile.

:func:`choose_variant` is the refit: the fit's structural choices (e.g. whether the CPU share is fitted,
whether a run without workers informs the workers' costs) are tried, and the variant whose worst
leave-one-out error is smallest is kept: cross-validation picks which term was wrong for this job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

_log = logging.getLogger("lotus.model")
SLACK = 0.10  # a probe may be off its prediction by its interval's half-width plus this
MIN_PI = 0.02  # a prediction interval never claims better than +-2%


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """``predicted / measured - 1`` (None when either is missing or the measurement is not positive)."""
    if predicted is None or measured is None or not measured > 0 or not math.isfinite(predicted):
        return None
    return predicted / measured - 1.0


def tolerance(measured: float | None, ci95) -> float:
    """How far a prediction may be from ``measured`` before it disagrees: half the interval + SLACK."""
    if not ci95 or not measured:
        return SLACK
    return (ci95[1] - ci95[0]) / 2 / measured + SLACK


@dataclass
class ProbeCheck:
    """One probe against the model."""

    name: str
    samples_per_s: float | None
    ci95: list[float] | None
    predicted_before: float | None = None  # by the model of the probes before it
    error_before: float | None = None  # predicted_before / measured - 1
    loo_predicted: float | None = None  # by the model of every other probe
    loo_error: float | None = None
    tolerance: float = SLACK
    disagrees: bool = False  # the error (leave-one-out, else before) beyond the tolerance
    note: str | None = None  # the measurement's note (why it has no interval, a wide one...)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ModelCheck:
    """The model against every probe: per probe, whether it holds, its prediction interval."""

    probes: list[ProbeCheck] = field(default_factory=list)
    holds: bool | None = None  # None: no probe could be checked
    prediction_interval: float | None = None  # relative half-width for unmeasured points
    variant: str | None = None  # the fit's structural variant chosen by leave-one-out (None: the default)
    variants: dict[str, float | None] = field(default_factory=dict)  # variant -> its worst |loo error|
    notes: list[str] = field(default_factory=list)

    @property
    def disagreeing(self) -> list[ProbeCheck]:
        return [p for p in self.probes if p.disagrees]

    def to_dict(self) -> dict:
        return {"probes": [p.to_dict() for p in self.probes], "holds": self.holds, "slack": SLACK,
                "prediction_interval": self.prediction_interval, "variant": self.variant,
                "variants": self.variants, "notes": self.notes}


@dataclass(frozen=True)
class Probe:
    """What :func:`check_probes` needs of one probe: its name, what the fit takes (``run``), its rate and
    interval, and ``key``, which ``predict(model, key)`` understands (workers, CPUs, cache...)."""

    name: str
    run: object
    samples_per_s: float
    ci95: Sequence[float] | None
    key: object
    predicted_before: float | None = None
    note: str | None = None  # the measurement's note


def _safe(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # a fit or prediction that fails leaves that check open, never the search
        _log.debug("model check: %r", exc)
        return None


def check_probes(probes: Sequence[Probe], fit: Callable[[list], object],
                 predict: Callable[[object, object], float | None]) -> ModelCheck:
    """Leave-one-out errors of ``probes`` (see the module doc). ``fit(runs) -> model`` (None: cannot fit),
    ``predict(model, key) -> samples/s`` (None: cannot predict)."""
    out = ModelCheck()
    full = _safe(fit, [p.run for p in probes]) if len(probes) == 1 else None
    for i, p in enumerate(probes):
        c = ProbeCheck(p.name, p.samples_per_s, list(p.ci95) if p.ci95 else None,
                       predicted_before=p.predicted_before, error_before=rel_error(p.predicted_before, p.samples_per_s),
                       tolerance=tolerance(p.samples_per_s, p.ci95), note=p.note)
        others = [q.run for j, q in enumerate(probes) if j != i]
        model = _safe(fit, others) if others else None
        if model is not None:
            c.loo_predicted = _safe(predict, model, p.key)
            c.loo_error = rel_error(c.loo_predicted, p.samples_per_s)
        err = c.loo_error if c.loo_error is not None else c.error_before
        if err is None and full is not None:  # one probe: the model of itself
            err = rel_error(_safe(predict, full, p.key), p.samples_per_s)
        c.disagrees = err is not None and abs(err) > c.tolerance
        out.probes.append(c)
    errs = [abs(c.loo_error) for c in out.probes if c.loo_error is not None]
    checked = [c for c in out.probes if c.loo_error is not None or c.error_before is not None]
    out.holds = (not any(c.disagrees for c in out.probes)) if checked or full is not None else None
    if errs:
        out.prediction_interval = max(*errs, MIN_PI)
    for c in out.disagreeing:
        if c.loo_error is not None:
            how, pred, err = "the other probes' model", c.loo_predicted, c.loo_error
        elif c.error_before is not None:
            how, pred, err = "the model before it", c.predicted_before, c.error_before
        else:
            how, pred, err = "the model of itself", None, None
        said = f"predicted {pred:,.1f} ({err:+.0%}; " if pred is not None and err is not None else "("
        out.notes.append(f"probe {c.name}: measured {c.samples_per_s:,.1f} samples/s, {how} {said}more than its "
                         f"interval +{SLACK:.0%}): the model does not hold for this job there")
    return out


def choose_variant(probes: Sequence[Probe], variants: dict[str, Callable[[list], object]],
                   predict: Callable[[object, object], float | None]) -> tuple[str, ModelCheck]:
    """The fit variant whose worst leave-one-out error is smallest (ties: the first, the default); its check
    carries every variant's worst error. With fewer than 3 probes leave-one-out cannot compare variants:
    the first is kept."""
    names = list(variants)
    if len(probes) < 3 or len(names) == 1:
        chk = check_probes(probes, variants[names[0]], predict)
        chk.variant = names[0]
        return names[0], chk
    results: dict[str, ModelCheck] = {}
    worst: dict[str, float | None] = {}
    for name in names:
        chk = check_probes(probes, variants[name], predict)
        results[name] = chk
        errs = [abs(c.loo_error) for c in chk.probes if c.loo_error is not None]
        worst[name] = max(errs) if len(errs) == len(probes) else None
    usable = [n for n in names if worst[n] is not None]
    best = min(usable, key=lambda n: (worst[n], names.index(n))) if usable else names[0]
    chk = results[best]
    chk.variant, chk.variants = best, worst
    if best != names[0]:
        chk.notes.append(f"refitted as '{best}': its worst leave-one-probe-out error {worst[best]:.0%} "
                         f"against {worst[names[0]]:.0%} for '{names[0]}'" if worst[names[0]] is not None
                         else f"refitted as '{best}'")
    return best, chk


__all__ = ["MIN_PI", "SLACK", "ModelCheck", "Probe", "ProbeCheck", "check_probes", "choose_variant", "rel_error",
           "tolerance"]
