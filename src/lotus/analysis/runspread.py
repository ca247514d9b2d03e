"""Rates across runs and ranks: the run-to-run spread added to a rate's interval, and sums of rates.

One run's hand-offs cannot show how much separate runs of the same job differ (CPU clocks, placement,
neighbours on the host): :func:`default_run_spread` is added to every reported rate
(:mod:`lotus.analysis.throughput`), :func:`repeats` measures it from runs that repeat one configuration,
:func:`with_run_spread` adds it to a :class:`lotus.analysis.steady.SteadyRate`'s interval. :func:`combine` sums
independent rates (ranks side by side) with their intervals. :func:`control_check` reads a search's control
probe (one of its settings measured again at its end, :class:`Control`): how far separate runs' pace differs,
and the spread every rate of that search then carries. The within-run estimator is :mod:`lotus.analysis.steady`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from lotus.analysis.steady import SteadyRate, t975

RUN_SPREAD = 0.015  # run-to-run relative sd added to a reported rate's interval (LOTUS_RUN_SPREAD overrides)
RUN_SPREAD_DOF = 20  # the confidence in it, as degrees of freedom


def default_run_spread() -> float:
    """The run-to-run spread added to every reported rate: ``$LOTUS_RUN_SPREAD`` (a fraction; 0: none) or
    :data:`RUN_SPREAD`. Separate runs of one job on one host differ by more than one run's hand-offs show
    (CPU clocks, placement, neighbours): measured in ``benchmarks/calibration.py`` repeats (each its own
    process), steady CPU jobs on 2 CPUs of the GPU host spread 0.8-1.8% (sd) where their own intervals
    said +-0.2% for the steadiest (docs/intervals.md). More batches cannot narrow it: the probes' stop
    rule (lotus.dataloader.probe) judges the within-run interval alone."""
    import os

    raw = os.environ.get("LOTUS_RUN_SPREAD")
    if raw:
        try:
            v = float(raw)
            if 0 <= v < 1:
                return v
        except ValueError:
            pass
    return RUN_SPREAD


def _beyond_within(rates, ses) -> float:
    """Relative sd between runs beyond their own standard errors: ``var(between) - mean(se^2)``, floored at 0."""
    x = np.array(rates, dtype=float)
    within = float(np.mean(np.square(ses)))
    return math.sqrt(max(float(np.var(x, ddof=1)) - within, 0.0)) / float(x.mean())


def with_run_spread(r: SteadyRate, rel_sd: float | None, dof: int) -> SteadyRate:
    """``r`` with a run-to-run spread (:func:`repeats`' ``beyond_rel_sd``) added to its interval: standard errors
    in quadrature, Welch-Satterthwaite degrees of freedom. Unchanged without a spread or without an interval of
    its own."""
    if rel_sd is None or r.se is None or not r.samples_per_s or dof < 1:
        return r
    from dataclasses import replace

    v_in, v_run = r.se ** 2, (rel_sd * r.samples_per_s) ** 2
    v = v_in + v_run
    if v <= 0 or v_run <= 0:
        return replace(r, run_rel_sd=rel_sd)
    df = v ** 2 / ((v_in ** 2 / r.dof if r.dof else 0.0) + v_run ** 2 / dof)
    hw = t975(max(int(df), 1)) * math.sqrt(v)
    return replace(r, ci95=(max(r.samples_per_s - hw, 0.0), r.samples_per_s + hw), se=math.sqrt(v),
                   dof=max(int(df), 1), run_rel_sd=rel_sd, within_ci95=r.ci95)


Z95 = 1.96


@dataclass
class Reading:
    """One probe's rate as a search recorded it: ``within_rel_halfwidth`` is the 95% half-width of the run alone
    (before the run-to-run spread, :func:`lotus.analysis.throughput.throughput`'s), ``at_s`` when it started."""

    name: str
    samples_per_s: float
    ci95: tuple[float, float] | list[float] | None = None
    within_rel_halfwidth: float | None = None
    at_s: float | None = None

    def rel_halfwidth(self) -> float:
        """The run's own 95% half-width for its rate (its whole interval's when that is not known; inf: none)."""
        if self.within_rel_halfwidth is not None:
            return self.within_rel_halfwidth
        if self.ci95 and self.samples_per_s:
            return (self.ci95[1] - self.ci95[0]) / 2 / self.samples_per_s
        return math.inf

    def se(self, default_rel_sd: float) -> float:
        """Standard error of the run alone: from its within-run half-width, else its interval less the default
        run-to-run spread (in quadrature)."""
        if self.within_rel_halfwidth is not None:
            return self.within_rel_halfwidth * self.samples_per_s / Z95
        if not self.ci95:
            return 0.0
        hw = (self.ci95[1] - self.ci95[0]) / 2 / Z95
        return math.sqrt(max(hw ** 2 - (default_rel_sd * self.samples_per_s) ** 2, 0.0))


@dataclass
class Control:
    """One setting of a search measured again at its end, in a run of its own (a control probe). ``drift``:
    repeat / first - 1; ``apart``: the two differ by more than their own (within-run) intervals allow;
    ``pair_rel_sd``: the spread between runs the pair shows beyond those intervals (one pair: a rough measure, 0
    when within them);
    ``run_rel_sd``: the spread every rate of the search carries from now on, the larger of it and the default
    (:func:`default_run_spread`, already in each probe's interval); ``even_odds_rel_sd``: the spread between runs
    (sd, relative to the pair's mean) that a pair this noisy shows as apart only half the time (:func:`even_odds`):
    a spread below it mostly goes unseen (on the GPU host pairs of +-7-12% probes, even odds at 11-17%, saw
    nothing in 3 of 4 rounds where the job alone's runs spread 7-10% within a machine,
    docs/results/gpu-h200/issue-24/control/)."""

    setting: str
    first_probe: str
    repeat_probe: str
    first_samples_per_s: float
    repeat_samples_per_s: float
    first_ci95: list[float] | None
    repeat_ci95: list[float] | None
    seconds_apart: float | None
    drift: float
    apart: bool
    pair_rel_sd: float
    run_rel_sd: float
    default_rel_sd: float
    pooled_samples_per_s: float
    pooled_ci95: list[float]
    even_odds_rel_sd: float = 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "note": self.note()}

    @property
    def widens(self) -> bool:
        return self.run_rel_sd > self.default_rel_sd

    def widen(self, rate: float | None, interval) -> list[float] | None:
        """``interval`` (around ``rate``) with the spread beyond the default added in quadrature on each side."""
        if not rate or not interval or not self.widens:
            return list(interval) if interval else interval
        extra = Z95 * rate * math.sqrt(self.run_rel_sd ** 2 - self.default_rel_sd ** 2)
        lo, hi = interval
        return [max(rate - math.hypot(max(rate - lo, 0.0), extra), 0.0), rate + math.hypot(max(hi - rate, 0.0), extra)]

    def note(self) -> str:
        when = f" {self.seconds_apart:.0f} s later" if self.seconds_apart is not None else " at the end"
        head = (f"control: {self.setting} measured again{when} ({self.repeat_probe}): "
                f"{self.repeat_samples_per_s:,.1f} samples/s against {self.first_samples_per_s:,.1f} first "
                f"({self.drift:+.1%})")
        if not self.apart:
            return (head + f": within the two probes' own intervals, no change of the host's pace shown; a pair this "
                    f"noisy shows runs whose pace differs by {self.even_odds_rel_sd:.0%} (sd) only half the time "
                    f"(`lotus run --repeat 5` measures a smaller spread: LOTUS_RUN_SPREAD carries it)")
        return (head + f": beyond both probes' own intervals, the pace moved between the two runs; rates of separate "
                f"runs of this job differ by about that much, so every rate and interval here carries a "
                f"run-to-run spread of {self.run_rel_sd:.1%} (sd, from this one pair: a rough measure) instead of "
                f"{self.default_rel_sd:.1%}; the setting's rate is the two probes' mean (LOTUS_RUN_SPREAD="
                f"{self.run_rel_sd:.2g} adds that spread to every rate lotus reports of this job on this host)")


Z50 = 0.6745  # the median of |N(0, 1)|


def even_odds(se1: float, se2: float, mean: float) -> float:
    """The spread between runs (sd, relative to ``mean``) at which two probes with standard errors ``se1`` and
    ``se2`` differ by more than their own 95% intervals allow (:func:`control_check`'s ``apart``) half the time:
    their difference is normal with variance 2 (sd x mean)^2 + se1^2 + se2^2 and its median size then equals the
    threshold ``Z95 x hypot(se1, se2)``."""
    if mean <= 0:
        return 0.0
    return math.hypot(se1, se2) * math.sqrt(((Z95 / Z50) ** 2 - 1) / 2) / mean


def control_choice(readings: list[Reading]) -> int | None:
    """Which of a search's probes its control repeats: the one whose own interval was narrowest for its rate
    (the one that can show the smallest change of the host's pace; on the GPU host a 16-worker probe of the
    oversubscribed ResNet-18 read +-43-47% where its 4-worker probes read +-6-10%), the earliest of equals;
    None without a rate."""
    rated = [(r.rel_halfwidth(), i) for i, r in enumerate(readings) if r.samples_per_s]
    return min(rated)[1] if rated else None


def control_check(first: Reading, repeat: Reading, setting: str) -> Control | None:
    """The control pair read (see :class:`Control`); None when either has no rate."""
    if not first.samples_per_s or not repeat.samples_per_s:
        return None
    d0 = default_run_spread()
    se1, se2 = first.se(d0), repeat.se(d0)
    r1, r2 = first.samples_per_s, repeat.samples_per_s
    apart = abs(r2 - r1) > Z95 * math.hypot(se1, se2)
    pair = _beyond_within([r1, r2], [se1, se2]) if apart else 0.0
    spread = max(pair, d0)
    mean = (r1 + r2) / 2
    hw = Z95 * math.sqrt((se1 ** 2 + se2 ** 2) / 4 + (spread * mean) ** 2 / 2)
    apart_s = repeat.at_s - first.at_s if first.at_s is not None and repeat.at_s is not None else None
    return Control(setting=setting, first_probe=first.name, repeat_probe=repeat.name, first_samples_per_s=r1,
                   repeat_samples_per_s=r2, first_ci95=list(first.ci95) if first.ci95 else None,
                   repeat_ci95=list(repeat.ci95) if repeat.ci95 else None, seconds_apart=apart_s,
                   drift=r2 / r1 - 1, apart=apart, pair_rel_sd=pair, run_rel_sd=spread, default_rel_sd=d0,
                   pooled_samples_per_s=mean, pooled_ci95=[max(mean - hw, 0.0), mean + hw],
                   even_odds_rel_sd=even_odds(se1, se2, mean))


def repeats(readings: list[Reading]) -> dict | None:
    """Runs that repeat one configuration (each its own process), read together: the mean of their rates with
    the t-interval of that mean over the runs (``mean_ci95``), their spread (``rel_sd``), the part of it beyond
    each run's own interval (``beyond_rel_sd``: the ``LOTUS_RUN_SPREAD`` that gives a single run of this job an
    interval that holds it), and the calibration of the runs' reported intervals (docs/intervals.md):
    ``coverage``, the share of runs with an interval whose interval holds the mean of the others (``held`` of
    ``with_interval``), and ``width_ratio``, their mean half-width over the runs' own 95% half-width
    (``t975(n-1) x sd``; targets >= 90% and <= 2). The one scoring of ``lotus analyze throughput --repeats`` and
    of benchmarks/calibration*.py. None with fewer than two rated runs."""
    rated = [r for r in readings if r.samples_per_s]
    if len(rated) < 2:
        return None
    x = np.array([r.samples_per_s for r in rated], dtype=float)
    n, total = len(x), float(x.sum())
    mean = total / n
    sd = float(x.std(ddof=1))
    hw = t975(n - 1) * sd / math.sqrt(n)
    with_ci = [i for i, r in enumerate(rated) if r.ci95]
    held = [i for i in with_ci if rated[i].ci95[0] <= (total - x[i]) / (n - 1) <= rated[i].ci95[1]]
    hws = [(rated[i].ci95[1] - rated[i].ci95[0]) / 2 for i in with_ci]
    emp = t975(n - 1) * sd
    return {"runs": n, "names": [r.name for r in rated], "mean_samples_per_s": mean,
            "mean_ci95": [max(mean - hw, 0.0), mean + hw], "rel_sd": sd / mean,
            "beyond_rel_sd": _beyond_within(x, [r.se(default_run_spread()) for r in rated]), "dof": n - 1,
            "with_interval": len(with_ci), "held": len(held), "held_by": [rated[i].name for i in held],
            "coverage": len(held) / len(with_ci) if with_ci else None,
            "rel_mean_halfwidth": float(np.mean(hws)) / mean if hws else None,
            "rel_empirical_halfwidth": emp / mean,
            "width_ratio": float(np.mean(hws)) / emp if hws and emp > 0 else None,
            "default_rel_sd": default_run_spread()}


def repeats_of(summaries: dict[str, dict]) -> dict | None:
    """:func:`repeats` of runs given as ``{name: their throughput summary}`` (what
    :func:`lotus.analysis.throughput.throughput` and a launched run's ``summary()`` give: ``samples_per_s``,
    ``ci95``, ``within_rel_halfwidth``)."""
    return repeats([Reading(name, t.get("samples_per_s"), t.get("ci95"), t.get("within_rel_halfwidth"))
                    for name, t in summaries.items()])


def combine(rates: list[SteadyRate]) -> tuple[float | None, tuple[float, float] | None]:
    """Sum of independent rates (ranks side by side) and its interval (half-widths added in quadrature)."""
    vals = [r for r in rates if r.samples_per_s is not None]
    if not vals:
        return None, None
    total = sum(r.samples_per_s for r in vals)
    if any(r.ci95 is None for r in vals):
        return total, None
    hw = math.sqrt(sum(((r.ci95[1] - r.ci95[0]) / 2) ** 2 for r in vals))
    return total, (max(total - hw, 0.0), total + hw)
