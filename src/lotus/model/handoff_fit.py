"""The queue part of busy workers' hand-offs, fitted by simulation so that each run reproduces its own rate.

Where the runs told busy workers' hand-offs apart from idle ones' (:func:`lotus.model.measures.busy_handoff`),
each busy hand-off is simulated per batch as a share of the worker's next batch. That is not all they cost:
the main process receives the batches in the order the workers put them, and a receive that waits for a busy
worker's interpreter lock holds up every batch behind it (on the GPU host, 16-batch epochs at 4 workers: a
batch ready at 78 ms arrived at 239, behind another worker's; docs/results/gpu-h200/issue-24/short-epochs/).
That part grows with the share of busy hand-offs, as :mod:`lotus.model.handoff`'s queue does; it is fitted
here per run (the busy part of the queue's service that makes the engine give the run's measured rate, by
bisection) and its median kept. Runs with fewer than half their hand-offs busy do not tell it
(:data:`lotus.model.handoff.MIN_BUSY_FIT`); where none tells it, it is 0.
"""

from __future__ import annotations

from dataclasses import replace

from lotus.model.engine import predict
from lotus.model.handoff import MIN_BUSY_FIT, busy_share

BISECTIONS = 10  # simulations per run: the part to within 1 ms (the bracket over 2^10)
MAX_BUSY_MS = 1000.0  # the bracket's top (ms a busy hand-off)
SIM_BATCHES = 200


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

