"""The calling thread's scheduler statistics: time on a CPU and time runnable but waiting for one.

Linux keeps both per thread in ``/proc/thread-self/schedstat`` ("on-CPU ns, run-queue ns, slices"). One
file descriptor per thread, opened once and read with ``pread`` (about a microsecond): the worker reads it
at the start and end of each batch (the ``runq`` event), the main process every few hand-offs (``main_cpu``).
Elsewhere (no procfs, another OS) :meth:`ThreadSched.read` gives None and nothing is recorded.

The descriptor stays bound to the thread that opened it: open it in the thread to be measured.
"""

from __future__ import annotations

import os

PATH = "/proc/thread-self/schedstat"


class ThreadSched:
    """Reads the opening thread's cumulative (on-CPU ns, run-queue ns)."""

    __slots__ = ("fd",)

    def __init__(self, path: str = PATH) -> None:
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except (OSError, AttributeError):
            self.fd = -1

    def read(self) -> tuple[int, int] | None:
        """(ns on a CPU, ns waiting on a run queue) since the thread started; None where unavailable."""
        if self.fd < 0:
            return None
        try:
            cpu, runq, *_ = os.pread(self.fd, 96, 0).split()
            return int(cpu), int(runq)
        except (OSError, ValueError):
            self.close()
            return None

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1

    def __del__(self):
        self.close()
