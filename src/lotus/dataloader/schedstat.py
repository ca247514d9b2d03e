"""The calling thread's kernel accounting: time on a CPU, time runnable but waiting for one, bytes read
from storage.

Linux keeps the first two per thread in ``/proc/thread-self/schedstat`` ("on-CPU ns, run-queue ns,
slices") and the third in ``/proc/thread-self/io`` (``read_bytes``: what the thread made the kernel fetch
from a block device: page-cache misses and their read-ahead, not the bytes it copied out of the cache).
One file descriptor per thread and file, opened once and read with ``pread`` (1-3 microseconds): the worker
reads schedstat at the start and end of each batch and io at its end (the ``runq`` event), the main
process schedstat every few hand-offs (``main_cpu``). Elsewhere (no procfs, another OS) the readers give
None and nothing is recorded.

The descriptor stays bound to the thread that opened it: open it in the thread to be measured.
"""

from __future__ import annotations

import os

PATH = "/proc/thread-self/schedstat"
IO_PATH = "/proc/thread-self/io"
_READ_BYTES = b"\nread_bytes: "


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


class ThreadIO:
    """Reads the opening thread's cumulative bytes read from storage (``read_bytes`` of its io file)."""

    __slots__ = ("fd",)

    def __init__(self, path: str = IO_PATH) -> None:
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except (OSError, AttributeError):
            self.fd = -1
        if self.read() is None:  # opened but unreadable (another process's thread, a kernel without it)
            self.close()

    def read(self) -> int | None:
        """Bytes the thread has read from storage since it started; None where unavailable."""
        if self.fd < 0:
            return None
        try:
            b = os.pread(self.fd, 512, 0)
            i = b.index(_READ_BYTES) + len(_READ_BYTES)
            return int(b[i:b.index(b"\n", i)])
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
