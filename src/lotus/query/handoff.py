"""How a scanning process hands its part back to the process that merges the parts (issue 26, item 1).

Through the pool's pipe, a part (tens of MB of numpy arrays: the folded per-batch columns, the op
histograms) is pickled into one bytes object, written through a 64 KiB pipe, read back piece by piece
into a buffer, copied out of it and unpickled, copying every array again: measured on this project's
2-CPU VM, 110 MB of arrays cost the receiving process 0.38 CPU-seconds, CPU taken from the processes
still scanning (docs/results/parallel_100m_2cpu.txt). Here the part is pickled with its arrays *out of band*
(pickle protocol 5): the worker writes their bytes once into a file in a memory-backed directory
(:func:`handoff_dir`: ``/dev/shm`` where there is one) and sends back only the small pickle that
refers to them (:class:`Sent`); the merging process maps each large array's bytes on their own (private,
copy-on-write: the arrays stay writable) and unpickles over the mappings, copying nothing: 0.02
CPU-seconds for the same 110 MB. One mapping an array, not one a part: the merge copies most of a part's
arrays into its own and drops them, and a few it keeps must not hold the rest of the part in memory (one
mapping a part raised the merging process's peak from 236 to 818 MiB with 16 processes on 64 ranks).

The file is unlinked as soon as it is mapped (its memory is freed with the last array over it) and
the directory is the caller's (:func:`handoff_dir`), removed with everything in it when the scan ends,
whatever happened; one left by a process killed mid-scan is removed by the next scan on the machine.
A worker that cannot write the file (no room, no permission) returns the part itself, through the
pipe as before (logged at debug level); nothing else changes.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass

from lotus._env import SHM_DIR as SHM

_log = logging.getLogger("lotus.trace")
PREFIX = "lotus-parts-"  # the parts' directories: lotus-parts-<pid of the scan>-<random>
MAP_MIN = 1 << 16  # buffers of at least this many bytes are mapped on their own; smaller ones are read (copied)
STALE_S = 600  # a part directory untouched this long whose process is gone is stale (a part is written every
# few seconds to a minute while its scan runs; the age also spares a live scan of another PID namespace
# sharing /dev/shm, whose id means nothing here)


@dataclass(frozen=True)
class Sent:
    """A part in a file: the pickle without its arrays (``head``), and each array's bytes in ``path`` at (offset,
    size): the large ones page-aligned, each mapped on its own (:func:`receive`)."""

    head: bytes
    spans: tuple[tuple[int, int], ...]
    path: str



@contextlib.contextmanager
def handoff_dir():
    """A private directory for the parts' files, memory-backed where the system has one, removed on exit. Its
    name holds this process's id: directories left by a process that no longer runs (killed mid-scan: memory
    a tmpfs keeps until it is removed) are removed first (:func:`_remove_stale`)."""
    base = SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK) else None
    _remove_stale(base or tempfile.gettempdir())
    prefix = f"{PREFIX}{os.getpid()}-"
    try:
        path = tempfile.mkdtemp(prefix=prefix, dir=base)
    except OSError:
        path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_stale(base: str) -> None:
    """Remove the part directories under ``base`` whose process (the id in their name) is gone and that nothing
    has written to for :data:`STALE_S` seconds."""
    import time

    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if time.time() - os.stat(os.path.join(base, name)).st_mtime < STALE_S:
                continue
        except OSError:
            continue
        _log.debug("removing %s, left by process %s", os.path.join(base, name), pid)
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def send(obj, where: str):
    """``obj`` as a :class:`Sent` in a new file under ``where``; ``obj`` itself when the file cannot be written."""
    buffers: list = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    path = None
    try:
        fd, path = tempfile.mkstemp(dir=where, suffix=".part")
        try:
            fh = os.fdopen(fd, "wb")
        except OSError:
            os.close(fd)
            raise
        spans, at = [], 0
        with fh:
            for b in buffers:
                raw = b.raw()
                if raw.nbytes >= MAP_MIN and at % mmap.ALLOCATIONGRANULARITY:  # its own mapping: aligned
                    at += mmap.ALLOCATIONGRANULARITY - at % mmap.ALLOCATIONGRANULARITY
                    fh.seek(at)  # a hole: no memory
                fh.write(raw)
                spans.append((at, raw.nbytes))
                at += raw.nbytes
        return Sent(head, tuple(spans), path)
    except (OSError, BufferError) as exc:  # full, gone, or a buffer that is not contiguous
        _log.debug("a scan part goes back through the pipe: %s", exc)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return obj


def receive(got):
    """The object a :func:`send` made (a :class:`Sent` is read from its file, which is then unlinked). Each large
    array gets a private copy-on-write mapping of its own bytes (writable, freed with the array: an array the
    merge keeps does not keep the part's other arrays in memory); small ones are read into memory."""
    if not isinstance(got, Sent):
        return got
    views = []
    try:
        with open(got.path, "rb") as fh:
            for at, size in got.spans:
                if size >= MAP_MIN:
                    views.append(memoryview(mmap.mmap(fh.fileno(), size, offset=at, access=mmap.ACCESS_COPY)))
                else:
                    fh.seek(at)
                    views.append(memoryview(bytearray(fh.read(size))))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(got.path)
    return pickle.loads(got.head, buffers=views)
