"""The worker -> main hand-off as a queue: its latency grows with the rate of batches the main process takes.

A batch a worker has finished reaches the loop through the main process (the result queue, unpickling,
the pin-memory thread, the loop's own thread between steps): one server, mostly bound by one interpreter
lock. Its latency is then queueing, not a constant: measured on the GPU host (ResNet-18 on JPEGs, 16 CPUs,
docs/results/gpu-h200/issue-24/whatif-sched/), the latency of the batches the loop was waiting for was 393 ms
at 16 workers (18.8 batches/s, the main process using 0.91 CPUs) and 29 ms at 8 workers (12.3 batches/s,
0.55 CPUs), its CPU per batch about the same (48 and 45 ms). An M/D/1 queue of service time ``S`` has the
wait ``Wq = rho / (2 (1 - rho)) * S`` with ``rho = lambda * S``; the traced run's ``Wq`` and ``lambda`` give
``S`` (the positive root of ``lambda S^2 + 2 Wq lambda S - 2 Wq = 0``: 50 ms for the run at 16 workers, whose
main process measured 48 ms of CPU a batch) and the wait at another rate follows (that run's ``S`` gives
40 ms at 8 workers' rate, against 29 measured). The engine iterates latency and rate to their fixed point.

The server's time is not the main process's alone: a batch's storage is handed over by the worker that made it
(torch shares it through a file descriptor that the main process fetches from the worker's resource-sharer
thread while unpickling), and that worker's threads need its interpreter lock, which the worker holds while it
prepares its next batch in Python code. Measured on the GPU host (docs/results/gpu-h200/issue-24/cross/): 16-
batch epochs of 2 ms Python samples, a service of 27 ms a batch at 4 workers and 17 ms at 8, where every
worker prepares another batch after 3 of its 4 hand-offs (4 workers) or 1 of its 2 (8): per hand-off from a
busy worker 36 and 34 ms, and M/D/1 with a fixed service had predicted 8 workers at half of 4's rate (the
queue near saturation) where the job alone ran 1.6x faster. So the service is per hand-off *from a busy
worker*, scaled by the share of hand-offs whose worker is busy: the share of its time a worker prepares
batches, times the share of its batches that are not its last of an epoch (after the last one it waits for
the next epoch's indices): :func:`busy_share`.

Where a run's batches tell busy hand-offs from idle ones (:func:`lotus.model.measures.busy_handoff`), a busy
hand-off is simulated per batch instead, as a share of what the worker goes straight on to prepare, and only
its head-of-line part stays a queue here, calibrated per run (:mod:`lotus.model.handoff_fit`; docs/model.md,
"Busy workers' hand-offs, batch by batch").
"""

from __future__ import annotations

import math

MIN_BUSY_SHARE = 0.05  # the busy share is floored here: a traced service divided by it stays bounded
# a run tells the part per busy hand-off only where at least this share of its hand-offs came from busy workers:
# from fewer, dividing by their share multiplies whatever else delays a hand-off (on the GPU host, 16-batch
# epochs of fresh workers, the loop waited ~70 ms for idle workers' batches too at 7-14 workers; from the 14-
# and 16-worker traces, 2 workers read -74% / -84%); such a run tells the main process's part only. The rest
# of its latency is then not modelled: the engine's fixed point is the queue of that part alone (a fixed
# latency beside the queue is not built; docs/results/corpus-local-2cpu/short-epochs/)
MIN_BUSY_FIT = 0.5
MAX_RHO = 0.98  # the queue's utilisation is capped here (its wait 24.5 S): a main process at its limit


def service_ns(wait_ns: float | None, batches_per_s: float | None) -> float | None:
    """The hand-off server's time per batch (ns) from a measured queueing wait (ns) at a batch rate; None
    when either is unknown or not positive."""
    if not wait_ns or not batches_per_s or wait_ns <= 0 or batches_per_s <= 0:
        return None
    lam = batches_per_s / 1e9
    return (-2 * wait_ns * lam + math.sqrt(4 * (wait_ns * lam) ** 2 + 8 * lam * wait_ns)) / (2 * lam)


def busy_share(num_workers: int, epoch_batches: float | None) -> float:
    """The share of hand-offs whose worker is preparing another batch meanwhile: ``1 - num_workers /
    epoch_batches`` (each worker's last batch of an epoch is followed by no work; 1 without epochs seen), at
    least :data:`MIN_BUSY_SHARE`. (Scaling it also by the share of its time a worker prepares batches was
    tried on the same traces and read worse: a self-prediction of 16 workers' ResNet-18 from -4% to -12%.)"""
    tail = 1.0 if not epoch_batches else max(1.0 - num_workers / epoch_batches, 0.0)
    return max(tail, MIN_BUSY_SHARE)


def wait_ns(service: float, batches_per_s: float) -> float:
    """The M/D/1 queueing wait (ns) of a server of ``service`` ns a batch at ``batches_per_s``."""
    rho = min(max(batches_per_s * service / 1e9, 0.0), MAX_RHO)
    return rho / (2 * (1 - rho)) * service
