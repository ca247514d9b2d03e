"""The page cache of a dataset's files, without root: evict, warm, and measure what is resident.

* :func:`evict` drops files from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after
  writing back their dirty pages (``fdatasync``); files one may open, no privileges needed. Pages
  mapped by running processes may stay: :func:`resident` says what is left.
* :func:`warm` reads files (up to a byte budget) so that they are cached.
* :func:`resident` measures the cached fraction with ``mincore(2)`` over a memory map of each file.
* :func:`cache_room` says how much page cache this process and its children can hold: the memory
  available, or under a memory cgroup's limit (containers, Slurm, ``benchmarks/slowdisk.sh``), that limit
  less the cgroup's own anonymous memory (the page cache is charged to the cgroup: a dataset larger than
  what is left is read from disk whatever the host's free memory).

Used by ``lotus stalls`` (cold vs warm probes) and ``lotus sensitivity`` (page-cache budgets).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import random
from dataclasses import dataclass

_log = logging.getLogger("lotus.profile")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class CacheAction:
    """What an evict/warm pass did."""

    files: int = 0
    bytes: int = 0
    failed: int = 0
    first_error: str | None = None

    def fail(self, path: str, exc: OSError) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"{path}: {exc.strerror or exc}"


def evict(paths) -> CacheAction:
    """Drop ``paths`` from the page cache (as far as the kernel lets an unprivileged process)."""
    out = CacheAction()
    if not hasattr(os, "posix_fadvise"):
        out.first_error = "posix_fadvise is not available on this platform"
        out.failed = len(list(paths))
        return out
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError as exc:
            out.fail(p, exc)
            continue
        try:
            size = os.fstat(fd).st_size
            try:
                os.fdatasync(fd)  # dirty pages (a freshly written file) cannot be dropped before they are written
            except OSError:
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            out.files += 1
            out.bytes += size
        except OSError as exc:
            out.fail(p, exc)
        finally:
            os.close(fd)
    return out


def warm(paths, budget_bytes: int | None = None, chunk: int = 1 << 20) -> CacheAction:
    """Read ``paths`` in order (at most ``budget_bytes``) so that the page cache holds them."""
    out = CacheAction()
    buf = bytearray(chunk)
    for p in paths:
        if budget_bytes is not None and out.bytes >= budget_bytes:
            break
        try:
            with open(p, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    out.bytes += n
            out.files += 1
        except OSError as exc:
            out.fail(p, exc)
    return out


def _mincore():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    fn = getattr(libc, "mincore", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fn.restype = ctypes.c_int
    return fn


def resident(paths, sample: int | None = 200, seed: int = 0) -> float | None:
    """Fraction of the bytes of ``paths`` (a random sample of ``sample`` files) in the page cache;
    None when it cannot be measured (no mincore, no readable file)."""
    fn = _mincore()
    if fn is None:
        return None
    paths = list(paths)
    if sample is not None and len(paths) > sample:
        paths = random.Random(seed).sample(paths, sample)
    cached = total = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    continue
                # a private (copy-on-write) map of a read-only file: its address can be taken; nothing is written
                with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mm:
                    pages = (size + _PAGE - 1) // _PAGE
                    vec = (ctypes.c_ubyte * pages)()
                    anchor = ctypes.c_char.from_buffer(mm)
                    try:
                        rc = fn(ctypes.addressof(anchor), size, vec)
                    finally:
                        del anchor
                    if rc != 0:
                        continue
                    cached += sum(v & 1 for v in bytes(vec)) * _PAGE
                    total += pages * _PAGE
        except (OSError, ValueError):
            continue
    return min(1.0, cached / total) if total else None


_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number (9223372036854771712)


def _meminfo_available(root: str = "/proc/meminfo") -> int | None:
    try:
        with open(root) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _stat(path: str, keys: tuple[str, ...]) -> int:
    out = 0
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k in keys:
                    out += int(v)
    except (OSError, ValueError):
        return 0
    return out


def _cgroup_room(proc_cgroup: str, fs: str) -> tuple[int, str] | None:
    """(bytes, cgroup path) the tightest memory limit of this process's cgroup and its ancestors leaves for
    the page cache (limit - the cgroup's anonymous memory); None without a limit (or a cgroup fs)."""
    try:
        with open(proc_cgroup) as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f if ln.count(":") >= 2]
    except OSError:
        return None
    v1 = next((p for _, ctl, p in lines if "memory" in ctl.split(",")), None)
    v2 = next((p for hid, ctl, p in lines if hid == "0" and ctl == ""), None)
    if v1 is not None and os.path.isdir(os.path.join(fs, "memory")):
        base, limit_f, anon = os.path.join(fs, "memory"), "memory.limit_in_bytes", ("rss", "shmem")
        rel = v1
    elif v2 is not None and os.path.exists(os.path.join(fs, "cgroup.controllers")):
        base, limit_f, anon = fs, "memory.max", ("anon", "shmem")
        rel = v2
    else:
        return None
    best = None
    parts = [p for p in rel.split("/") if p]
    for i in range(len(parts), -1, -1):  # this cgroup, then each ancestor up to the root: the tightest wins
        d = os.path.join(base, *parts[:i])
        try:
            with open(os.path.join(d, limit_f)) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw == "max" or not raw.isdigit() or int(raw) >= _NO_LIMIT:
            continue
        room = max(int(raw) - _stat(os.path.join(d, "memory.stat"), anon), 0)
        if best is None or room < best[0]:
            best = (room, "/" + "/".join(parts[:i]))
    return best


def cache_room(proc: str = "/proc", fs: str = "/sys/fs/cgroup") -> tuple[int | None, str | None]:
    """(bytes of page cache this process's processes can hold, what bounds it: "memory" or "cgroup <path>");
    (None, None) when unknown. See the module doc."""
    avail = _meminfo_available(os.path.join(proc, "meminfo"))
    cg = _cgroup_room(os.path.join(proc, "self", "cgroup"), fs)
    if cg is not None and (avail is None or cg[0] < avail):
        return cg[0], f"cgroup {cg[1]}"
    return (avail, "memory") if avail is not None else (None, None)
