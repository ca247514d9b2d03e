"""How a scanning process hands its part back to the process that merges the parts (issue 26, item 1).

Through the pool's pipe, a part (tens of MB of numpy arrays: the folded per-batch columns, the op
histograms) is pickled into one bytes object, written through a 64 KiB pipe, read back piece by piece
into a buffer, copied out of it and unpickled, copying every array again: measured on this project's
2-CPU VM, 110 MB of arrays cost the receiving process 0.38 CPU-seconds, CPU taken from the processes
still scanning (benchmarks/scale.py). Here the part is pickled with its arrays *out of band*
(pickle protocol 5): the worker writes their bytes once into a file in a memory-backed directory
(:func:`handoff_dir`: ``/dev/shm`` where there is one) and sends back only the small pickle that
refers to them (:class:`Sent`); the merging process maps the file (private, copy-on-write: the arrays
stay writable) and unpickles over the mapping, copying nothing: 0.02 CPU-seconds for the same 110 MB.

The file is unlinked as soon as it is mapped (its memory is freed with the last array over it) and
the directory is the caller's (:func:`handoff_dir`), removed with everything in it when the scan ends,
whatever happened. A worker that cannot write the file (no room, no permission) returns the part
itself, through the pipe as before (logged once at debug level); nothing else changes.
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

_log = logging.getLogger("lotus.trace")
SHM = "/dev/shm"


@dataclass(frozen=True)
class Sent:
    """A part in a file: the pickle without its arrays (``head``), the arrays' bytes in ``path``, their sizes."""

    head: bytes
    sizes: tuple[int, ...]
    path: str


@contextlib.contextmanager
def handoff_dir():
    """A private directory for the parts' files, memory-backed where the system has one, removed on exit."""
    base = SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK) else None
    try:
        path = tempfile.mkdtemp(prefix="lotus-parts-", dir=base)
    except OSError:
        path = tempfile.mkdtemp(prefix="lotus-parts-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
        sizes = []
        with fh:
            for b in buffers:
                raw = b.raw()
                fh.write(raw)
                sizes.append(raw.nbytes)
        return Sent(head, tuple(sizes), path)
    except (OSError, BufferError) as exc:  # full, gone, or a buffer that is not contiguous
        _log.debug("a scan part goes back through the pipe: %s", exc)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return obj


def receive(got):
    """The object a :func:`send` made (a :class:`Sent` is read from its file, which is then unlinked)."""
    if not isinstance(got, Sent):
        return got
    try:
        with open(got.path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) if sum(got.sizes) else None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(got.path)
    views, at = [], 0
    whole = memoryview(mm) if mm is not None else memoryview(b"")
    for size in got.sizes:
        views.append(whole[at: at + size])
        at += size
    return pickle.loads(got.head, buffers=views)
