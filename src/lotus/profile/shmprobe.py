"""What the worker path costs a batch's bytes on this machine: fresh shared memory against private memory.

With workers, torch's collation in a worker allocates the batch's tensors in shared memory (so the main process
can map them) and writes them there; the main process then touches those pages for the first time when its
pin-memory thread or the loop reads the batch. A num_workers=0 trace measured neither: its collation wrote into
private memory. Measured on this 2-core VM (a batch of 128 3x224x224 floats, 77 MB, torch's own DataLoader):
the collation took 15.6 ms in the main process and 60.6 ms in a worker (+45 ms); this probe's estimate for
the same bytes, +41 ms (shared 46.1 ms against private 5.1 ms), and 7.2 ms for the main process's first touch
(``python benchmarks/shm_collate.py``).
On the GPU host the traced collation was 14 ms without workers and 62-65 ms in workers.

:func:`measure` writes ``nbytes`` into fresh private memory, into fresh shared memory
(:class:`multiprocessing.shared_memory.SharedMemory`, /dev/shm as torch's file-descriptor sharing uses), and
reads every page of a second mapping of the latter, a few times each, and returns the extra ns per byte of the
two shared steps. It runs where it is called: the numbers are this machine's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lotus._env import SHM_DIR

_log = logging.getLogger("lotus.profile")

MAX_BYTES = 512 << 20  # larger batches are measured at this size (the cost is per byte)
PAGE = 4096


def _shm_room() -> int:
    """Bytes free in the shared-memory file system (a container's may hold 64 MB); 0 where there is none."""
    import os

    try:
        st = os.statvfs(SHM_DIR)
    except (OSError, AttributeError):
        return 0
    return st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class ShmCost:
    nbytes: int
    private_ms: float  # write nbytes into fresh private memory (the least of the repeats)
    shared_ms: float  # write nbytes into fresh shared memory
    touch_ms: float  # read every page of a second mapping of it

    @property
    def write_ns_per_byte(self) -> float:
        """A worker's extra time a byte: its collation writes into fresh shared memory, not private."""
        return max(self.shared_ms - self.private_ms, 0.0) * 1e6 / self.nbytes

    @property
    def touch_ns_per_byte(self) -> float:
        """The main process's time a byte to first touch a batch a worker made."""
        return self.touch_ms * 1e6 / self.nbytes


def measure(nbytes: int, repeats: int = 5) -> ShmCost | None:
    """The costs of ``nbytes`` (at most :data:`MAX_BYTES` and half the room left in /dev/shm: the cost is per
    byte) on this machine, the least of ``repeats`` each (what other work on the machine adds is not the cost);
    None where shared memory cannot be made (no /dev/shm, too little of it)."""
    from multiprocessing import shared_memory

    import numpy as np

    n = int(min(max(nbytes, PAGE), MAX_BYTES, _shm_room() // 2))  # a write past /dev/shm's room is a SIGBUS
    if n < PAGE:
        _log.warning("shared memory probe skipped: too little room in %s", SHM_DIR)
        return None
    private, shared, touch = [], [], []
    try:
        for _ in range(repeats):
            t = time.perf_counter()
            a = np.empty(n, np.uint8)
            a.fill(1)
            private.append(time.perf_counter() - t)
            del a
            t = time.perf_counter()
            shm = shared_memory.SharedMemory(create=True, size=n)
            try:
                b = np.ndarray(n, np.uint8, shm.buf)
                b.fill(1)
                shared.append(time.perf_counter() - t)
                del b
                t = time.perf_counter()
                other = shared_memory.SharedMemory(name=shm.name)
                try:
                    c = np.ndarray(n, np.uint8, other.buf)
                    int(c[::PAGE].sum())
                    touch.append(time.perf_counter() - t)
                    del c
                finally:
                    other.close()
            finally:
                shm.close()
                shm.unlink()
    except (OSError, ValueError, BufferError) as exc:
        _log.warning("shared memory probe failed: %s", exc)
        return None
    return ShmCost(n, min(private) * 1e3, min(shared) * 1e3, min(touch) * 1e3)


__all__ = ["MAX_BYTES", "ShmCost", "measure"]
