"""Rates over a window of a run (an epoch, a time bucket): the one rule.

The steady-state estimator (:mod:`lotus.analysis.steady`) measures a run's rate with its interval. Rates of
parts of a run (the report's trends per epoch and per time bucket) come from here, under one rule, so
that no rate is a division by a span too short to mean one:

* **enough hand-offs**: each loop (a rank's training loop) that handed out batches in the window handed
  out at least :data:`MIN_HANDOFFS` of them there; fewer say nothing about a rate ("too short");
* **between hand-offs** (:func:`between_rate`, per epoch): per loop, the samples handed out after its
  first hand-off in the window / the time from that hand-off to its last (so a window's rate is never
  above the densest stretch of hand-offs in it), summed over loops;
* **a count over a fixed window** (:func:`count_rate`, per time bucket): the samples handed out in the
  window / the part of the window the run covers, which must be at least :data:`MIN_COVER` of its width
  (the run's last bucket ends with its last hand-off; a bucket it barely enters is "too short");
* a rate that breaks the rule is ``None`` with a note that says why; these rates carry no interval
  (``ci95`` None: a count over a span, not an estimate of a steady state), and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_HANDOFFS = 3  # hand-offs of one loop in a window: fewer give no rate
MIN_COVER = 0.5  # share of a fixed window the run must cover for a count over it to be a rate
NO_INTERVAL = "no interval: a count over the window, not a steady-state estimate"


@dataclass(frozen=True)
class WindowRate:
    """A rate over a window: ``samples_per_s`` None when the window is too short (``note`` says why)."""

    samples_per_s: float | None
    handoffs: int  # hand-offs in the window, all loops
    samples: float  # samples handed out in the window, all loops
    span_s: float  # the window's span the rate divides by (0 without a rate)
    note: str | None = None


def _too_few(loops: dict) -> str | None:
    if any(np.isnan(n).any() for _t, n in loops.values()):
        return "samples per batch unknown (no collate records)"
    few = {k: len(t) for k, (t, _n) in loops.items() if 0 < len(t) < MIN_HANDOFFS}
    if not few:
        return None
    who = ", ".join(f"{k}: {v}" for k, v in sorted(few.items()))
    return f"too short: fewer than {MIN_HANDOFFS} hand-offs of a loop in the window ({who})"


def _totals(loops: dict) -> tuple[int, float]:
    return sum(len(t) for t, _ in loops.values()), float(sum(np.nansum(n) for _, n in loops.values()))


def between_rate(loops: dict) -> WindowRate:
    """``loops``: ``{name: (sorted hand-off ns, samples of each)}`` of one window. Per loop, the samples after
    its first hand-off / the time from it to its last; summed over loops."""
    handoffs, samples = _totals(loops)
    why = _too_few(loops) if handoffs else "no hand-off in the window"
    if why:
        return WindowRate(None, handoffs, samples, 0.0, why)
    rate, span = 0.0, 0.0
    for t, n in loops.values():
        if not len(t):
            continue
        d = (int(t[-1]) - int(t[0])) / 1e9
        if d <= 0:
            return WindowRate(None, handoffs, samples, 0.0, "too short: the hand-offs share one instant")
        rate += float(np.nansum(n[1:])) / d
        span = max(span, d)
    return WindowRate(rate, handoffs, samples, span)


def count_rate(loops: dict, lo_ns: int, hi_ns: int, end_ns: int) -> WindowRate:
    """The samples handed out in ``[lo, hi)`` (``loops`` as in :func:`between_rate`, already restricted to the
    window) / the span of it the run covers (it ends at ``end_ns``)."""
    handoffs, samples = _totals(loops)
    width = hi_ns - lo_ns
    covered = min(hi_ns, end_ns) - lo_ns
    if width <= 0 or covered < MIN_COVER * width:
        share = max(covered, 0) / width if width > 0 else 0.0
        return WindowRate(None, handoffs, samples, 0.0,
                          f"too short: the run covers {share:.0%} of the window (at least {MIN_COVER:.0%} needed)")
    why = _too_few(loops)
    if why:
        return WindowRate(None, handoffs, samples, 0.0, why)
    return WindowRate(samples / (covered / 1e9), handoffs, samples, covered / 1e9)
