"""The CPUs this process may run on (its affinity, which taskset, cgroups' cpusets and Slurm set), one definition
for every command: the scan's processes, the verdict's threads, tune's and sensitivity's grids, the planner's pool,
a loader's description."""

from __future__ import annotations

import os


def allowed() -> list[int]:
    """The CPU numbers this process may run on, ascending (every CPU where the platform has no affinity)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def count() -> int:
    """How many CPUs this process may run on (at least 1)."""
    return max(len(allowed()), 1)


__all__ = ["allowed", "count"]
