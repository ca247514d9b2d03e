"""Rates across runs and ranks: the run-to-run spread added to a rate's interval, and sums of rates.

One run's hand-offs cannot show how much separate runs of the same job differ (CPU clocks, placement,
neighbours on the host): :func:`default_run_spread` is added to every reported rate
(:mod:`lotus.analysis.throughput`), :func:`run_spread` measures it from repeats, :func:`with_run_spread` adds it
to a :class:`lotus.analysis.steady.SteadyRate`'s interval. :func:`combine` sums independent rates (ranks side by
side) with their intervals. The within-run estimator is :mod:`lotus.analysis.steady`.
"""

from __future__ import annotations

import math

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


def run_spread(rates) -> tuple[float | None, int]:
    """The spread between separate runs of one configuration beyond what each run's own interval explains:
    ``(relative sd, degrees of freedom)``; ``(None, 0)`` with fewer than two runs with an interval.

    Runs of one job differ by more than the hand-offs inside one run can show: on the GPU host (H200, the
    ResNet-18 JPEG job, 16 workers, 15-s windows) the epochs inside a run agreed within +-2-5% while six runs
    spread 6.8% (sd); the run sets its own pace (CPU placement, clocks, neighbours on the host). Only
    repeats measure it: ``var(between runs) - mean(within-run se^2)``, floored at 0."""
    vals = [r for r in rates if r.samples_per_s and r.se is not None]
    if len(vals) < 2:
        return None, 0
    x = np.array([r.samples_per_s for r in vals])
    within = float(np.mean([r.se ** 2 for r in vals]))
    between = float(np.var(x, ddof=1))
    return math.sqrt(max(between - within, 0.0)) / float(x.mean()), len(vals) - 1


def with_run_spread(r: SteadyRate, rel_sd: float | None, dof: int) -> SteadyRate:
    """``r`` with a run-to-run spread (:func:`run_spread`) added to its interval: standard errors in quadrature,
    Welch-Satterthwaite degrees of freedom. Unchanged without a spread or without an interval of its own."""
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
