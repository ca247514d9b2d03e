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
"""

from __future__ import annotations

import math

MAX_RHO = 0.98  # the queue's utilisation is capped here (its wait 24.5 S): a main process at its limit


def service_ns(wait_ns: float | None, batches_per_s: float | None) -> float | None:
    """The hand-off server's time per batch (ns) from a measured queueing wait (ns) at a batch rate; None
    when either is unknown or not positive."""
    if not wait_ns or not batches_per_s or wait_ns <= 0 or batches_per_s <= 0:
        return None
    lam = batches_per_s / 1e9
    return (-2 * wait_ns * lam + math.sqrt(4 * (wait_ns * lam) ** 2 + 8 * lam * wait_ns)) / (2 * lam)


def wait_ns(service: float, batches_per_s: float) -> float:
    """The M/D/1 queueing wait (ns) of a server of ``service`` ns a batch at ``batches_per_s``."""
    rho = min(max(batches_per_s * service / 1e9, 0.0), MAX_RHO)
    return rho / (2 * (1 - rho)) * service
