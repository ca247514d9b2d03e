"""The scheduler's view of traced runs (trace format 4, Linux): the CPU model's terms measured, not assumed.

Each worker fetch carries its thread's run-queue delay and CPU time (``runq``), the main process its CPU use
(``main_cpu``); :func:`sched_cpu` turns the runs' sums (:class:`lotus.model.params.RunSummary`) into the
template of :class:`lotus.sim.CpuModel` the fit searches contention with (docs/model.md "The scheduler's
view").
"""

from __future__ import annotations

import numpy as np

from lotus.sim import CpuModel


def main_busy(s) -> float:
    """Share of the run's loop time the main process was not blocked waiting (1 when unknown)."""
    share = s.steady_wait_share if s.steady_wait_share is not None else s.wait_share
    return 1.0 - share if share is not None else 1.0


SCHED_SHORTAGE = 0.03  # run-queue delay per ns on a CPU above which a run's CPUs were short (capacity fitted)


def sched_cpu(obs: list, main_cpu_cores: float,
              cpu_fraction: float | None) -> tuple[CpuModel, float | None, list[str]]:
    """(the CPU model's template, the measured CPU fraction or None, notes) from the scheduler's view of the
    runs (format >= 4 on Linux: each fetch's run-queue delay and CPU time, the main process's CPU use).

    Where every run with workers carries it, nothing about the CPUs is assumed: a worker's uncontended time is
    its fetch less its run-queue delay, of which its CPU time is the CPU fraction; the main process uses what
    it measured; and what made the run-queue delay the runs met is fitted so that processor sharing gives it
    (``1 + runq / cpu``): where the job's own load (``cpu_fraction * busy + main``) leaves CPUs idle, other
    work runnable beside it (other tenants, in CPUs): ``(load + other) / cpus``, a load of its own that stays
    what it was with fewer or more workers; where the job fills the CPUs itself, a capacity per CPU (its
    threads are more than its load says, hyper-threads share a core): ``load / (capacity * cpus)``, which
    grows with the job's load. (The capacity form alone read an I/O-bound job's wake-ups on a machine shared
    with a CPU-bound one as capacity 0.2, and a CPU shortage at twice its workers the job alone did not
    meet: -24%, issue 24's io_bound shape; the other-work form alone read +3 points higher at twice the
    workers of the CPU-filling tokenizer shape on the GPU host.) Where the load exceeds the CPUs and no delay
    was met, a capacity above 1 (fewer runnable than the load says). Elsewhere: the assumptions of the
    module doc (no other work, capacity 1, the main process ``main_cpu_cores`` while not waiting)."""
    runs = [o.summary for o in obs if o.summary.num_workers > 0]
    if not runs or any(s.sched_cpu_ns is None or not s.sched_cpu_ns for s in runs):
        return CpuModel(main_cpu_cores), None, []
    uncontended = [max(s.sched_prep_ns - s.sched_runq_ns, 1.0) for s in runs]
    phi = float(sum(s.sched_cpu_ns for s in runs) / sum(uncontended))
    phi = min(max(phi, 0.0), 1.0) if cpu_fraction is None else cpu_fraction
    measured_main = all(s.main_cpu_cores is not None for s in runs)
    mains = [s.main_cpu_cores if measured_main else main_cpu_cores * main_busy(s) for s in runs]
    caps, others = [], []
    for s, main in zip(runs, mains, strict=True):
        if not s.cpus:
            continue
        ps = 1.0 + s.sched_runq_ns / s.sched_cpu_ns
        load = phi * s.busy_workers + main
        if ps > 1.0 + SCHED_SHORTAGE and load < s.cpus:  # the job alone leaves CPUs idle: others are runnable
            others.append(s.cpus * ps - load)
            caps.append(1.0)
        elif ps > 1.0 + SCHED_SHORTAGE:  # the job fills the CPUs itself: its load is more than it seems
            caps.append(min(max(load / (s.cpus * ps), 0.2), 1.0))
            others.append(0.0)
        elif load > s.cpus:  # no CPU shortage met where the assumptions see one: at least that much capacity
            caps.append(min(load / s.cpus, 2.0))
            others.append(0.0)
        else:
            others.append(0.0)
    capacity = float(np.median(caps)) if caps else 1.0
    other = float(np.median(others)) if others else 0.0
    main = float(np.median(mains)) if measured_main else main_cpu_cores
    waited = sum(s.sched_runq_ns for s in runs) / sum(s.sched_prep_ns for s in runs)
    notes = [f"the scheduler's view: workers waited for a CPU {waited:.0%} of their fetch time, on a CPU "
             f"{phi:.0%} of the rest (CPU fraction); "
             + (f"the main process used {main:.2f} CPUs; " if measured_main else "")
             + (f"other work runnable on the CPUs: {other:.2f} CPUs' worth" if other > 0 else
                (f"capacity {capacity:.2f} CPUs' worth a CPU" if capacity != 1.0 else "no CPU shortage met"))]
    template = CpuModel(main, 0.0, phi, capacity, measured_main, other)
    return template, (phi if cpu_fraction is None else None), notes


__all__ = ["SCHED_SHORTAGE", "main_busy", "sched_cpu"]
