"""The hand-off's fit from the runs: its service parts (:func:`service_parts`) and the queue part of busy workers'
hand-offs, fitted by simulation so that each run reproduces its own rate (:func:`fitted_busy_queue`).

Where the runs told busy workers' hand-offs apart from idle ones' (:func:`lotus.model.measures.busy_handoff`),
each busy hand-off is simulated per batch as a share of what its worker goes straight on to prepare. That is not
all they cost: the main process receives the batches in the order the workers put them, and a receive that waits
for a busy worker's interpreter lock holds up every batch behind it (on the GPU host, 16-batch epochs at 4 workers: a
batch ready at 78 ms arrived at 239, behind another worker's; docs/results/gpu-h200/issue-24/short-epochs/).
That part grows with the share of busy hand-offs, as :mod:`lotus.model.handoff`'s queue does; it is fitted
here per run (the busy part of the queue's service that makes the engine give the run's measured rate, by
bisection) and its median kept. Runs with fewer than half their hand-offs busy do not tell it
(:data:`lotus.model.handoff.MIN_BUSY_FIT`); where none tells it, it is 0.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lotus.model.engine import predict
from lotus.model.handoff import MIN_BUSY_FIT, busy_share, service_ns

BISECTIONS = 10  # simulations per run: the part to within 1 ms (the bracket over 2^10)
MAX_BUSY_MS = 1000.0  # the bracket's top (ms a busy hand-off)
SIM_BATCHES = 200


def service_parts(obs) -> tuple[float | None, float, float]:
    """The hand-off server's time per batch (ms; :mod:`lotus.model.handoff`): (the part that stays at every
    worker count, the part per hand-off from a worker busy with its next batch, a busy worker's hand-off
    latency as a share of its next batch), medians over the runs with workers. A run's service is what its
    arrive latency at its own batch rate gives; the main process's own part is at most its measured CPU per
    batch beyond the step's time and the epoch restarts' (all of it where the main process's CPU was not
    measured); the rest is over the run's busy share. Where a run measured busy workers' hand-offs apart from
    idle ones' (:func:`lotus.model.measures.busy_handoff`: the former at least twice as slow, so not a queue
    that slows every hand-off) they are simulated per batch, each a share of what its worker goes straight on
    to prepare, and no run tells a busy part of the queue ((fixed, 0, share)). (None, 0, 0) when no run tells."""
    told = [o.busy_handoff[0] for o in obs if o.summary.num_workers > 0 and o.busy_handoff]
    fixed, busy = [], []
    for o in obs:
        s = o.summary
        if s.num_workers <= 0 or not s.samples_per_s:
            continue
        per_s = s.samples_per_s / s.batch_size
        got = service_ns(o.arrive_latency_ns, per_s)
        if not got:
            continue
        main = got
        if s.main_cpu_cores is not None:
            step = float(np.mean(o.step_ns)) if o.step_ns is not None and o.step_ns.size else 0.0
            # the epoch's restart (fresh workers forked by the main process) is main CPU that is not hand-offs
            restart = float(np.median(o.epoch_gap_ns)) / o.epoch_batches if o.epoch_batches and \
                o.epoch_gap_ns.size else 0.0
            main = min(max(s.main_cpu_cores * 1e9 / per_s - step - restart, 0.0), got)
        fixed.append(main)
        share = busy_share(s.num_workers, o.epoch_batches)
        if not told and share >= MIN_BUSY_FIT:  # enough busy hand-offs to tell their part (else not a queue's)
            busy.append((got - main) / share)
    share = float(np.median(told)) if told else 0.0
    if not fixed:
        return None, 0.0, share
    return float(np.median(fixed)) / 1e6, float(np.median(busy)) / 1e6 if busy else 0.0, share


def fitted_busy_queue(model, runs) -> float:
    """The busy part of the hand-off queue (ms a busy hand-off): the median over ``runs`` (observations whose
    share of busy hand-offs is at least MIN_BUSY_FIT) of the part that makes ``model`` predict the run's
    measured samples/s at its own setting; 0 where no run tells it."""
    parts = []
    for o in runs:
        s = o.summary
        if s.num_workers <= 0 or not s.samples_per_s or busy_share(s.num_workers, o.epoch_batches) < MIN_BUSY_FIT:
            continue
        part = _run_part(model, s)
        if part is not None:
            parts.append(part)
    if not parts:
        return 0.0
    parts.sort()
    mid = len(parts) // 2
    return parts[mid] if len(parts) % 2 else 0.5 * (parts[mid - 1] + parts[mid])


def _run_part(model, s) -> float | None:
    """The busy part (ms) that makes ``model`` give run ``s``'s measured rate at its setting; 0 where the
    per-batch part alone is as slow; None where even the bracket's top is too fast (the run does not tell)."""

    def rate(busy_ms: float) -> float | None:
        p = predict(replace(model, handoff_busy_ms=busy_ms), s.num_workers, s.cpus, batch_size=s.batch_size,
                    prefetch_factor=s.prefetch_factor or None, n_batches=SIM_BATCHES)
        return p.samples_per_s

    fast = rate(0.0)
    if fast is None or fast <= s.samples_per_s:
        return 0.0
    if (rate(MAX_BUSY_MS) or 0.0) > s.samples_per_s:
        return None
    lo, hi = 0.0, MAX_BUSY_MS
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        got = rate(mid)
        if got is None:
            break
        lo, hi = (mid, hi) if got > s.samples_per_s else (lo, mid)
    return 0.5 * (lo + hi)


def unseen_queue(model, num_workers: int) -> bool:
    """Whether a prediction at ``num_workers`` leans on a head-of-line part no run told: the runs told busy
    hand-offs per batch but no queue part (:func:`fitted_busy_queue` 0), and this count has a larger share of busy
    hand-offs than every run (fewer workers: each prepares more batches an epoch). Measured from such runs
    (docs/results/gpu-h200/issue-24/busy-handoff/): 8 -> 4 workers +21% / +46% on the GPU host, 8 -> 2 and 4
    -19% / -11% on the 2-CPU VM: off either way."""
    if num_workers <= 0 or model.handoff_busy_share <= 0 or model.handoff_busy_ms > 0 or not model.epoch_batches:
        return False
    traced = [r.num_workers for r in model.runs if r.num_workers > 0]
    here = busy_share(num_workers, model.epoch_batches)
    return bool(traced) and all(here > busy_share(w, model.epoch_batches) + 1e-9 for w in traced)
