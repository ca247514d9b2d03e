"""The calling thread's kernel accounting: time on a CPU, time runnable but waiting for one, bytes read
from storage.

Linux keeps the first two per thread in ``/proc/thread-self/schedstat`` ("on-CPU ns, run-queue ns,
slices") and the third in ``/proc/thread-self/io`` (``read_bytes``: what the thread made the kernel fetch
from a block device: page-cache misses and their read-ahead, not the bytes it copied out of the cache).
One file descriptor per thread and file, opened once and read with ``pread`` (1-3 microseconds): the worker
reads schedstat at the start and end of each batch and io at its end (the ``runq`` event), the main
process schedstat every few hand-offs (``main_cpu``) and, without workers, around each batch it prepares
itself (:class:`FetchMeter`, the same ``runq`` event; format >= 6). Elsewhere (no procfs, another OS) the readers give
None and nothing is recorded.

The descriptor stays bound to the thread that opened it: open it in the thread to be measured.
"""

from __future__ import annotations

import os
from threading import get_ident

PATH = "/proc/thread-self/schedstat"
IO_PATH = "/proc/thread-self/io"
_READ_BYTES = b"\nread_bytes: "


class _ThreadFile:
    """One procfs file of the opening thread, kept open and read with ``pread``; closed for good on an error."""

    __slots__ = ("fd",)

    def __init__(self, path: str) -> None:
        try:
            self.fd = os.open(path, os.O_RDONLY)
        except (OSError, AttributeError):
            self.fd = -1

    def _pread(self, n: int) -> bytes | None:
        if self.fd < 0:
            return None
        try:
            return os.pread(self.fd, n, 0)
        except OSError:
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


class ThreadSched(_ThreadFile):
    """Reads the opening thread's cumulative (on-CPU ns, run-queue ns)."""

    __slots__ = ()

    def __init__(self, path: str = PATH) -> None:
        super().__init__(path)

    def read(self) -> tuple[int, int] | None:
        """(ns on a CPU, ns waiting on a run queue) since the thread started; None where unavailable."""
        b = self._pread(96)
        try:
            cpu, runq, *_ = b.split()
            return int(cpu), int(runq)
        except (AttributeError, ValueError):  # None (unavailable) or not numbers
            self.close()
            return None


class ThreadIO(_ThreadFile):
    """Reads the opening thread's cumulative bytes read from storage (``read_bytes`` of its io file)."""

    __slots__ = ()

    def __init__(self, path: str = IO_PATH) -> None:
        super().__init__(path)
        if self.read() is None:  # opened but unreadable (another process's thread, a kernel without it)
            self.close()

    def read(self) -> int | None:
        """Bytes the thread has read from storage since it started; None where unavailable."""
        b = self._pread(512)
        try:
            i = b.index(_READ_BYTES) + len(_READ_BYTES)
            return int(b[i:b.index(b"\n", i)])
        except (AttributeError, ValueError):
            self.close()
            return None


METER_EVERY = 8  # the loop thread's fetches: one measured in this many (FetchMeter)


class FetchMeter:
    """The ``runq`` record of batches a thread prepares itself (num_workers=0: the loop's thread): schedstat
    and read_bytes at the fetch's start and end, for one fetch in :data:`METER_EVERY` (the first, then every
    ``METER_EVERY``-th). Every fetch measured cost the loop ~11 us a batch on the 2-CPU VM (three procfs reads:
    text pipeline +5.8%, trivial +1.7 us a sample in benchmarks/overhead_pairs.py, against +0.8% / 0.2 us without
    them); the model takes the unmeasured batches' run-queue delay at the measured ones' share of their fetch
    (lotus.model.observation). Opened by the first thread that starts a fetch; another thread's fetches are not
    measured (its descriptors would read the opener's counters)."""

    __slots__ = ("io", "io0", "n", "q0", "sched", "thread")

    def __init__(self) -> None:
        self.thread = get_ident()
        self.sched = ThreadSched()
        self.io = ThreadIO()
        self.n = 0
        self.q0 = self.io0 = None

    def start(self) -> None:
        self.n += 1
        if (self.n - 1) % METER_EVERY or get_ident() != self.thread:
            self.q0 = None
            return
        self.q0 = self.sched.read()
        self.io0 = self.io.read()

    def record(self, rec, kind: int, start_ns: int, batch: int) -> None:
        """Write the ``runq`` record (``kind``) of the measured fetch of ``batch`` that began at ``start_ns``."""
        q0, self.q0 = self.q0, None
        q1 = self.sched.read() if q0 is not None else None
        if q1 is None:
            return
        now = self.io.read()
        disk = -1 if now is None or self.io0 is None else max(now - self.io0, 0)
        rec.rec(kind, start_ns, q1[1] - q0[1], batch, disk, q1[0] - q0[0])
