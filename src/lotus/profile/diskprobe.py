"""What the storage gives N readers of a dataset's files: a replay of the workers' reads, outside the job.

:func:`replay` reads a random sample of the files, whole, from ``readers`` threads at once, each pausing
``think_s`` between two files (the CPU work a worker does between its reads, as a sleep: the replay
needs no CPU), after dropping the sample from the page cache (:mod:`lotus.profile.pagecache`) so every
read goes to the storage; the sample is dropped again afterwards. It stops after ``seconds`` or
``max_bytes`` (whichever first). The mean time to read one file at that many readers is what the model
scales a traced run's storage time by (:mod:`lotus.model.storage`); bandwidth caps, queueing on the device
and token-bucket throttles (cloud disks) all show in it, as they would for the job's workers.

Threads release the GIL in ``read``: N threads are N concurrent readers, as N worker processes are.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass

_log = logging.getLogger("lotus.profile")
CHUNK = 1 << 20


@dataclass
class ReadRate:
    """One replay: ``readers`` threads reading ``files`` files (``bytes`` in all) in ``seconds``."""

    readers: int
    files: int
    bytes: int
    seconds: float
    read_ms: float | None  # mean time to read one file, whole (open to close)
    failed: int = 0

    @property
    def bytes_per_s(self) -> float | None:
        return self.bytes / self.seconds if self.seconds > 0 and self.files else None


def _read_whole(path: str) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return n
            n += len(b)


def replay(files: list[str], readers: int, *, think_s: float = 0.0, seconds: float = 1.0,
           max_bytes: int = 512 << 20, seed: int = 0, sizes: dict[str, int] | None = None) -> ReadRate:
    """Read a random sample of ``files`` from ``readers`` threads (module doc); ``sizes`` (path -> bytes,
    when known) bounds the sample to ``max_bytes``."""
    from lotus.profile import pagecache

    readers = max(int(readers), 1)
    order = list(files)
    random.Random(seed).shuffle(order)
    sample, total = [], 0
    for p in order:
        size = (sizes or {}).get(p)
        if size is None:
            try:
                size = os.stat(p).st_size
            except OSError:
                continue
        if sample and total + size > max_bytes:
            break
        sample.append(p)
        total += size
    pagecache.evict(sample)
    lock = threading.Lock()
    it = iter(sample)
    got = {"files": 0, "bytes": 0, "read_ns": 0, "failed": 0}
    deadline = time.perf_counter() + seconds

    def reader() -> None:
        while time.perf_counter() < deadline:
            with lock:
                p = next(it, None)
            if p is None:
                return
            t0 = time.perf_counter_ns()
            try:
                n = _read_whole(p)
            except OSError:
                with lock:
                    got["failed"] += 1
                continue
            dt = time.perf_counter_ns() - t0
            with lock:
                got["files"] += 1
                got["bytes"] += n
                got["read_ns"] += dt
            if think_s > 0:
                time.sleep(think_s)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=reader, daemon=True) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60.0)
    elapsed = time.perf_counter() - t0
    pagecache.evict(sample)  # as the storage had them: not cached
    out = ReadRate(readers=readers, files=got["files"], bytes=got["bytes"], seconds=elapsed,
                   read_ms=got["read_ns"] / got["files"] / 1e6 if got["files"] else None, failed=got["failed"])
    _log.debug("storage replay: %d readers, %d files, %.1f MB in %.2f s (%s ms a file)", readers, out.files,
               out.bytes / 1e6, elapsed, out.read_ms)
    return out


__all__ = ["ReadRate", "replay"]
