"""prefetch_factor, pin_memory and persistent_workers, once num_workers is chosen (pure over a Session).

Each step starts from ``current``: the measurement of the best settings so far, and changes a setting to a
costlier value only when a probe (or, for persistent_workers on long epochs, an estimate from the trace)
shows a gain of at least ``min_gain`` over it with the intervals apart. Cheapest among equals: where the
job's own value is the costlier one (prefetch_factor above 2, pin_memory=True, persistent_workers=True),
the cheaper value is probed and taken when it cannot be told apart from the current best (the interval test
of the worker choice, :func:`lotus.tune.search.indistinct`). Every probed and rejected step gets a note.

* prefetch_factor: 2 -> 4 -> 8, only while batches arrive late although the workers could keep up
  (the loop waits ``LATE_WAIT`` or more of its time and the model's worker capacity exceeds the measured
  rate by ``tolerance``: bursty arrivals), or the model predicts a gain; stops at the first step that
  does not gain.
* pin_memory: probed only when the job used CUDA (GPU events in its trace); without CUDA pinning is a
  no-op and False is recommended outright.
* persistent_workers: the cost of an epoch start (workers shut down and started again) against the
  epoch's length. Measured with a probe per value that crosses an epoch boundary when an epoch is
  short enough; else estimated from the trace: the first epoch's start-up (iterator created -> first
  batch) minus one batch's preparation, over the epoch's time (batches per epoch x the steady batch
  interval). True when the share of an epoch saved is ``EPOCH_MIN_GAIN`` or more, else False.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lotus.tune.search import Session, indistinct, stop_below
from lotus.tune.types import LoaderSettings, Measurement

_log = logging.getLogger("lotus.tune")
LATE_WAIT = 0.05  # the loop waiting this share of its time or more: batches arrive late
PREFETCH_LADDER = (4, 8)
EPOCH_MIN_GAIN = 0.01  # share of an epoch's time persistent workers must save to be switched on (or off)


@dataclass
class Current:
    """The best settings so far and the measurement of them."""

    settings: LoaderSettings  # forced values (what later probes force too)
    measurement: Measurement

    @property
    def effective(self) -> LoaderSettings:
        eff = self.measurement.effective or LoaderSettings()
        return self.settings.over(eff)


def _better(m: Measurement | None, than: Measurement, min_gain: float) -> bool:
    """``m`` measured faster than ``than``: by ``min_gain`` at least and, where both have intervals,
    with intervals apart (else the cheaper setting stays)."""
    if m is None or not m.ok or m.samples_per_s < than.samples_per_s * (1 + min_gain):
        return False
    return not (m.ci95 and than.ci95 and m.ci95[0] <= than.ci95[1])


def _gain_floor(than: Measurement, min_gain: float) -> float | None:
    """The samples/s a probe must beat to be :func:`_better` than ``than``: one shown under it has lost."""
    return than.samples_per_s * (1 + min_gain) if than.samples_per_s else None


def _rate(m: Measurement) -> str:
    """'135.7 (115.9-155.4)': a probe's samples/s and its 95% interval."""
    ci = f" ({m.ci95[0]:,.1f}-{m.ci95[1]:,.1f})" if m.ci95 else ""
    return f"{m.samples_per_s:,.1f}{ci}"


def _cheaper(s: Session, cur: Current, settings: LoaderSettings, knob: str, value, own, *, near_best: float,
             predicted: float | None = None) -> Current | None:
    """Probe the cheaper ``value`` of ``knob`` (the job has ``own``); the new Current when it cannot be told
    apart from the current best (:func:`lotus.tune.search.indistinct`, as for num_workers), else None."""
    m = cur.measurement
    trial = s.measure(settings, knob, predicted=predicted, below=stop_below(m.samples_per_s, m.ci95, near_best))
    if trial is None:
        s.notes.append(f"{knob}: budget spent before the cheaper {value} was probed: kept {own}")
        return None
    if not trial.ok:
        s.notes.append(f"{knob}: the cheaper {value} failed (exit code {trial.exit_code}): kept {own}")
        return None
    if indistinct(trial.samples_per_s, trial.ci95, m.samples_per_s, m.ci95, near_best):
        how = "not slower than" if trial.samples_per_s >= m.samples_per_s else "cannot be told apart from"
        s.notes.append(f"{knob}: {value}: {_rate(trial)} {how} {own}: {_rate(m)}: the cheaper {value}")
        return Current(settings, trial)
    s.notes.append(f"{knob}: the cheaper {value}: {_rate(trial)} below {own}: {_rate(m)}: kept {own}")
    return None


def tune_prefetch(s: Session, cur: Current, *, tolerance: float, near_best: float, min_gain: float) -> Current:
    eff = cur.effective
    w = eff.num_workers or 0
    if w == 0:
        s.notes.append("prefetch_factor: no workers, it does not apply")
        return cur
    pf = eff.prefetch_factor or 2
    if pf > 2:  # cheapest among equals: torch's default 2 holds fewer batches in memory
        low = _cheaper(s, cur, cur.settings.with_(num_workers=w, prefetch_factor=2), "prefetch_factor", 2, pf,
                       near_best=near_best, predicted=s.rate(w, 2))
        if low is not None:
            return low
    m = cur.measurement
    now, nxt = s.predict(w, pf), s.predict(w, pf * 2)
    wait = m.wait_share if m.wait_share is not None else 0.0
    capacity = getattr(now, "input_samples_per_s", None) if now is not None else None
    per_rank = m.samples_per_s / max(s.ranks, 1)
    late = wait >= LATE_WAIT and capacity is not None and capacity >= per_rank * (1 + tolerance)
    model_gain = now is not None and nxt is not None and nxt.samples_per_s >= now.samples_per_s * (1 + near_best)
    if not (late or model_gain):
        why = (f"the loop waits {wait:.0%} of its time" + (" but the workers cannot deliver more" if wait >= LATE_WAIT
                                                            else "") + "; the model shows no gain")
        s.notes.append(f"prefetch_factor: kept at {pf} ({why})")
        return cur
    for value in (v for v in PREFETCH_LADDER if v > pf):
        settings = cur.settings.with_(num_workers=w, prefetch_factor=value)
        trial = s.measure(settings, "prefetch_factor", predicted=s.rate(w, value),
                          below=_gain_floor(cur.measurement, min_gain))
        kept = cur.effective.prefetch_factor or 2
        if trial is None:
            s.notes.append(f"prefetch_factor: budget spent before {value} was probed: kept {kept}")
            break
        if not trial.ok:
            s.notes.append(f"prefetch_factor: {value} failed (exit code {trial.exit_code}): kept {kept}")
            break
        if not _better(trial, cur.measurement, min_gain):
            s.notes.append(f"prefetch_factor: {value}: {_rate(trial)} not above {_rate(cur.measurement)}: kept {kept}")
            break
        s.notes.append(f"prefetch_factor: {value}: {_rate(trial)} above {_rate(cur.measurement)}: taken")
        cur = Current(settings, trial)
    return cur


def tune_pin(s: Session, cur: Current, *, min_gain: float, near_best: float = 0.02) -> Current:
    eff = cur.effective
    pinned = bool(eff.pin_memory)
    if not cur.measurement.cuda:
        if pinned:  # nothing to measure: pinned host memory only costs page-locked RAM without a GPU
            s.notes.append("pin_memory: False (the job used no CUDA: no GPU events in its trace; pinning is a no-op "
                           "that only locks host memory, so the cheaper False is recommended without a probe)")
            return Current(cur.settings.with_(num_workers=eff.num_workers, pin_memory=False), cur.measurement)
        s.notes.append("pin_memory: the job used no CUDA (no GPU events in its trace), pinning is a no-op: kept False")
        return cur
    if pinned:  # cheapest among equals: unpinned, unless pinning is measurably faster
        low = _cheaper(s, cur, cur.settings.with_(num_workers=eff.num_workers, pin_memory=False), "pin_memory",
                       False, True, near_best=near_best)
        return low if low is not None else cur
    settings = cur.settings.with_(num_workers=eff.num_workers, pin_memory=True)
    trial = s.measure(settings, "pin_memory", predicted=None, below=_gain_floor(cur.measurement, min_gain))
    if trial is None:
        s.notes.append("pin_memory: budget spent before True was probed: kept False")
        return cur
    if not trial.ok:
        s.notes.append(f"pin_memory: True failed (exit code {trial.exit_code}): kept False")
        return cur
    if _better(trial, cur.measurement, min_gain):
        s.notes.append(f"pin_memory: True: {_rate(trial)} above {_rate(cur.measurement)}: taken")
        return Current(settings, trial)
    s.notes.append(f"pin_memory: True: {_rate(trial)} not above {_rate(cur.measurement)}: kept False")
    return cur


def epoch_gain(cost_off_s: float, cost_on_s: float, epoch_s: float) -> float:
    """Share of an epoch (with non-persistent workers) that persistent workers save."""
    total = epoch_s + max(cost_off_s, 0.0)
    return (max(cost_off_s, 0.0) - max(cost_on_s, 0.0)) / total if total > 0 else 0.0


def tune_persistent(s: Session, cur: Current, *, steps: int, cross_max_steps: int) -> tuple[Current, float | None]:
    """``(current, share of an epoch saved by persistent workers)``; see the module doc."""
    eff = cur.effective
    w = eff.num_workers or 0
    if w == 0:
        s.notes.append("persistent_workers: no workers, it does not apply")
        return cur, None
    ep = cur.measurement.epochs
    bpe, interval = ep.batches_per_epoch, ep.batch_interval_s
    if not bpe or not interval:
        s.notes.append("persistent_workers: the epoch length is unknown (iterable dataset?): kept "
                       f"{bool(eff.persistent_workers)}")
        return cur, None
    epoch_s = bpe * interval
    own = bool(eff.persistent_workers)
    cross = bpe + max(5, steps // 2)
    if cross <= cross_max_steps:
        runs: dict[bool, Measurement] = {}
        if ep.epochs_crossed and ep.boundary_extra_s is not None:
            runs[own] = cur.measurement
        for value in (False, True):
            if value in runs:
                continue
            m = s.measure(cur.settings.with_(num_workers=w, persistent_workers=value), "persistent_workers",
                          steps=cross)
            if m is None or not m.ok or m.epochs.boundary_extra_s is None:
                s.notes.append("persistent_workers: the epoch-crossing probe failed or the budget is spent: kept "
                               f"{own}")
                return cur, None
            runs[value] = m
        gain = epoch_gain(runs[False].epochs.boundary_extra_s, runs[True].epochs.boundary_extra_s, epoch_s)
        how = (f"measured across an epoch boundary: {runs[False].epochs.boundary_extra_s:.3g} s per epoch start "
               f"without, {runs[True].epochs.boundary_extra_s:.3g} s with")
    else:
        off = ep.boundary_extra_s if (ep.epochs_crossed and not own) else None
        if off is None:
            if ep.startup_s is None:
                s.notes.append(f"persistent_workers: no epoch start in the trace: kept {own}")
                return cur, None
            off = max(ep.startup_s - (ep.batch_prep_s or 0.0), 0.0)
        gain = epoch_gain(off, 0.0, epoch_s)
        how = (f"estimated: an epoch start costs about {off:.3g} s (worker start-up) against an epoch of "
               f"{epoch_s:.3g} s ({bpe} batches)")
    value = gain >= EPOCH_MIN_GAIN  # within EPOCH_MIN_GAIN either way: the cheaper False (no idle workers kept)
    cheaper = "; cannot be told apart: the cheaper False" if own and -EPOCH_MIN_GAIN < gain < EPOCH_MIN_GAIN else ""
    s.notes.append(f"persistent_workers: {value} ({how}; {gain:+.1%} of an epoch's time{cheaper})")
    if value != own:
        cur = Current(cur.settings.with_(num_workers=w, persistent_workers=value), cur.measurement)
    return cur, gain


__all__ = ["EPOCH_MIN_GAIN", "LATE_WAIT", "PREFETCH_LADDER", "Current", "epoch_gain", "tune_persistent",
           "tune_pin", "tune_prefetch"]
