"""Arrays kept on disk instead of in memory (issue 17: analysis memory flat in the trace's size).

:func:`array` returns a numpy array over a shared mapping of a temporary file: its pages are the
kernel's page cache, written to disk under memory pressure, and :func:`trim` drops them from this
process's resident set (``MADV_DONTNEED``: the data stays in the file). What a computation reads of
such an array, a slice at a time, is resident only until the next :func:`trim`; so the peak resident
memory of a scan or a summary does not grow with the number of batches.

The file is unlinked as soon as it is mapped: its blocks are freed when the last array over it goes,
and the kernel frees them even if the process is killed; nothing is left behind on any error. The file
is allocated in full first (``posix_fallocate``), so a full disk is a :class:`SpillError` (one line in
the CLI), never a ``SIGBUS`` on a later write. Where: ``$LOTUS_SPILL_DIR``, else the temporary directory
(``$TMPDIR``, ``/tmp``).

Arrays smaller than :data:`MIN_BYTES` stay plain in-memory arrays (a mapping costs a page at least), and
so do all of them where the C library has no ``mmap``/``madvise`` to call (not a POSIX system).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import tempfile
import weakref

import numpy as np

from lotus.errors import LotusError

_log = logging.getLogger("lotus.trace")
MIN_BYTES = 1 << 16
_maps: weakref.WeakSet = weakref.WeakSet()  # the live mappings, for trim()


class SpillError(LotusError):
    """No room (or no permission) for the temporary files of the out-of-core engine."""


def spill_dir() -> str:
    return os.environ.get("LOTUS_SPILL_DIR") or tempfile.gettempdir()


def _load_libc():
    """The C library's mmap/munmap/madvise, or None where there are none (then arrays stay in memory)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        mmap.MADV_DONTNEED  # noqa: B018 - present where madvise is
    except (OSError, TypeError, AttributeError):
        return None
    return libc


_libc = _load_libc()
_FAILED = ctypes.c_void_p(-1).value


class _Map:
    """A shared mapping of a file, without keeping its descriptor open (``mmap.mmap`` keeps one per
    mapping: a run of many (rank, loader, epoch) groups would run out of them); unmapped once no array
    over it is left."""

    def __init__(self, fd: int, nbytes: int):
        addr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _FAILED:
            e = ctypes.get_errno()
            raise SpillError(f"cannot map a temporary file of {nbytes / 2**20:.0f} MiB ({os.strerror(e)})")
        self.addr, self.nbytes = addr, nbytes
        weakref.finalize(self, _libc.munmap, addr, nbytes)

    def buffer(self):
        buf = type("_SpillBuffer", (ctypes.c_ubyte * self.nbytes,), {}).from_address(self.addr)
        buf.owner = self  # the arrays' base: the mapping lives as long as they do
        return buf

    def drop(self, offset: int = 0, nbytes: int | None = None) -> None:
        _libc.madvise(self.addr + offset, self.nbytes - offset if nbytes is None else nbytes, mmap.MADV_DONTNEED)


def _mapping(nbytes: int) -> _Map:
    where = spill_dir()
    try:
        fd, path = tempfile.mkstemp(prefix="lotus-spill-", dir=where)
    except OSError as exc:
        raise SpillError(f"cannot create a temporary file in {where} ({exc.strerror}); "
                         "set $LOTUS_SPILL_DIR to a writable directory") from None
    try:
        os.unlink(path)
        try:
            if not hasattr(os, "posix_fallocate"):  # (macOS): sparse, as below
                raise OSError(errno.EOPNOTSUPP, "no posix_fallocate")
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise SpillError(f"no space left in {where} for {nbytes / 2**20:.0f} MiB of temporary batch "
                                 "columns; free some or set $LOTUS_SPILL_DIR to a larger disk") from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise SpillError(f"cannot allocate a temporary file in {where} ({exc.strerror})") from None
            os.ftruncate(fd, nbytes)  # a file system without fallocate: sparse (a full disk would be SIGBUS)
        return _Map(fd, nbytes)
    finally:
        os.close(fd)


_OFF: list = []  # set while in_memory() holds: arrays stay in memory


@contextlib.contextmanager
def in_memory():
    """Arrays made in a ``with`` block stay plain in-memory arrays (a worker process's part of a scan, whose
    arrays are sent back whole anyway: mapping, allocating and dropping their pages would cost more)."""
    _OFF.append(True)
    try:
        yield
    finally:
        _OFF.pop()


def array(n: int, dtype, fill=None) -> np.ndarray:
    """A 1-d array of ``n`` items of ``dtype`` on disk (module doc), filled with ``fill`` if given."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < MIN_BYTES or nbytes == 0 or _libc is None or _OFF:
        return np.empty(n, dtype) if fill is None else np.full(n, fill, dtype)
    mm = _mapping(nbytes)
    _maps.add(mm)
    out = np.frombuffer(mm.buffer(), dtype, n)
    if fill is not None and fill != 0:  # a new file reads as zeros
        step = max(1, (1 << 22) // dtype.itemsize)
        for i in range(0, n, step):  # in slices, dropped as they go: filling costs no memory
            out[i: i + step] = fill
            mm.drop(i * dtype.itemsize, min(step, n - i) * dtype.itemsize)
    return out


def copy_of(a: np.ndarray, dtype=None, n: int | None = None, fill=None) -> np.ndarray:
    """``a`` (converted to ``dtype``) in a spilled array of ``n >= len(a)`` items, the rest ``fill``."""
    n = len(a) if n is None else n
    out = array(n, a.dtype if dtype is None else dtype, fill if n > len(a) else None)
    step = 1 << 19
    for i in range(0, len(a), step):
        j = min(len(a), i + step)
        out[i:j] = a[i:j]
        drop(out, a)
    return out


def copies_of(arrays: dict) -> dict:
    """``{name: copy_of(a)}`` for the arrays of at least :data:`MIN_BYTES` (the others as they are), all in one
    temporary file: one file created and mapped for all of them, not one an array (a scan's merge receives a
    group's columns from a worker together: creating ~20 files a group cost a quarter of a second on 100M
    events)."""
    big = {n: a for n, a in arrays.items() if isinstance(a, np.ndarray) and a.nbytes >= MIN_BYTES}
    if not big or _libc is None or _OFF:
        return {n: copy_of(a) if n in big else a for n, a in arrays.items()}
    offsets, total = {}, 0
    for n, a in big.items():
        offsets[n] = total
        total += -(-a.nbytes // 64) * 64  # each array 64-byte aligned
    mm = _mapping(total)
    _maps.add(mm)
    buf = mm.buffer()
    out = dict(arrays)
    step = 1 << 19
    for n, a in big.items():
        c = np.frombuffer(buf, a.dtype, len(a), offsets[n])
        for i in range(0, len(a), step):
            c[i: i + step] = a[i: i + step]
        out[n] = c
    mm.drop()
    return out


def _base(a: np.ndarray):
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    base = base.obj if isinstance(base, memoryview) else base
    return getattr(base, "owner", base)


def is_spilled(a: np.ndarray) -> bool:
    return isinstance(_base(a), _Map)


def drop(*arrays: np.ndarray) -> None:
    """:func:`trim` for the mappings of ``arrays`` only (in-memory arrays are left alone)."""
    for a in arrays:
        mm = _base(a)
        if isinstance(mm, _Map):
            mm.drop()


def trim() -> None:
    """Drop every spilled array's pages from the resident set (their contents stay in the files)."""
    for mm in list(_maps):
        mm.drop()


__all__ = ["MIN_BYTES", "SpillError", "array", "copy_of", "drop", "is_spilled", "spill_dir", "trim"]
