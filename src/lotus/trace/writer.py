"""Per-process buffered writer of lotus trace files (format in :mod:`lotus.trace.schema`).

Hot path: ``writer.buf += writer.pack(name_id, loader, epoch, start_ns, dur_ns, batch_id, sample, arg)``
appends 48 bytes to a bytearray (no I/O, no lock, no Python object kept alive). Callers flush on a
bound (per batch in workers, by size/time in the main process); :meth:`TraceWriter.flush` is the only
place that touches the file. Any I/O failure disables the writer with one warning; later records
are dropped and the buffer stays bounded.

Rotation (day-long runs): with ``$LOTUS_ROTATE_MB`` and/or ``$LOTUS_ROTATE_S`` (or ``rotate_bytes=`` /
``rotate_s=``) a flush that leaves the current file at least that large, or that old, closes it and
continues in the next *part*, ``<name>.part0001.lotustrace`` and so on. Every part is a complete trace
file: the same header (plus ``"part": k`` and ``"repeated_defines": n``) and the ``n`` definition records
made so far, repeated first; only the last part gets the END record. With ``$LOTUS_COMPRESS_PARTS=1`` a
closed part is zstd-compressed by a background thread into ``<part>.zst`` (written to a temporary name,
renamed when complete; the plain part is then removed). The readers stitch parts back together
(:mod:`lotus.trace.parts`).
"""

from __future__ import annotations

import _thread
import atexit
import json
import os
import threading
import time
import weakref
from pathlib import Path

from lotus._warn import warn_once
from lotus.trace import schema as S
from lotus.trace.header import header_json

_FLUSH_BYTES = 256 * 1024
_FLUSH_INTERVAL_NS = 1_000_000_000
_TIMER_PERIOD_S = 0.5  # the flusher thread writes whatever is buffered this often (records are <= ~0.5 s late)


def _env_number(name: str) -> float | None:
    try:
        v = float(os.environ.get(name, "") or "nan")
    except ValueError:
        return None
    return v if v > 0 else None


def trace_file_name(role: str, rank: int, pid: int, worker_id: int = S.NO_ID) -> str:
    who = "main" if role == "main" else f"w{worker_id}"
    return f"lotus-r{rank}-{who}-p{pid}{S.FILE_SUFFIX}"


class TraceWriter:
    """One trace file of one process. Not shared across processes (see :func:`_after_fork`)."""

    def __init__(
        self,
        trace_dir: str | os.PathLike,
        role: str,
        *,
        rank: int = 0,
        world_size: int = 1,
        worker_id: int = S.NO_ID,
        flush_bytes: int = _FLUSH_BYTES,
        extra: dict | None = None,
        rotate_bytes: int | None = None,
        rotate_s: float | None = None,
    ) -> None:
        self.pid = os.getpid()
        mb = _env_number("LOTUS_ROTATE_MB")
        self.rotate_bytes = rotate_bytes or (int(mb * 2**20) if mb else None)
        self.rotate_ns = int((rotate_s or _env_number("LOTUS_ROTATE_S") or 0) * 1e9) or None
        self.compress_parts = os.environ.get("LOTUS_COMPRESS_PARTS", "").strip().lower() in ("1", "true", "yes")
        self._part = 0
        self._part_bytes = 0
        self._part_start_ns = time.monotonic_ns()
        self._defined = bytearray()  # every definition so far: repeated at the start of each part
        self._header_extra: dict = {}
        self.role = role
        self.rank = rank
        self.worker_id = worker_id
        self.flush_bytes = flush_bytes
        self.pack = S.PACK  # RECORD's bytes (lotus.trace.schema)
        self.buf = bytearray()
        self.ok = True
        self._path: str | None = None  # a string: pathlib's first use in a forked worker costs ~70 page faults
        self._file = None
        self._lock = threading.Lock()
        self._next_dynamic = S.FIRST_DYNAMIC_ID
        self._names: dict[str, int] = {}
        self._last_flush_ns = time.monotonic_ns()
        self._closed = False
        self.closers: list = []  # called before the file closes (e.g. resolve pending CUDA events)
        # weak methods that move records kept elsewhere into ``buf`` (the num_workers=0 fast path packs its
        # batches in bulk): called before every flush, from the flusher thread too
        self.drains: list = []
        try:
            if self.rotate_bytes or self.rotate_ns:
                extra = {**(extra or {}), "part": 0}
            self._header_extra = {"world_size": world_size, "extra": extra}
            head = self._preamble(world_size, extra)  # before the file: a header that cannot be made makes none
            d = os.fspath(trace_dir)
            if not os.path.isdir(d):
                os.makedirs(d, exist_ok=True)
            path = os.path.join(d, trace_file_name(role, rank, self.pid, worker_id))
            n = 1
            while True:
                try:
                    self._file = open(path, "xb", buffering=0)  # noqa: SIM115 - lives as long as the writer
                    break
                except FileExistsError:  # pid reused in the same directory by an earlier run
                    n += 1
                    path = os.path.join(d, trace_file_name(role, rank, self.pid, worker_id)[: -len(S.FILE_SUFFIX)]
                                        + f"-{n}{S.FILE_SUFFIX}")
            self._path = path
            self._base_path = path
            self._part_bytes = self._file.write(head)
        except Exception as exc:
            self._fail(f"cannot create a trace file in {os.fspath(trace_dir)!r}: {exc}")
        if self.ok:
            _timer.add(self, bare=role == "worker")

    @property
    def path(self) -> Path | None:
        """The file being written (the current part's); None when none could be created."""
        return Path(self._path) if self._path else None

    # -- header -----------------------------------------------------------------------------
    def _preamble(self, world_size: int, extra: dict | None, anchor: tuple[int, int] | None = None) -> bytes:
        wall = time.time_ns()
        mono = time.monotonic_ns()
        wall = (wall + time.time_ns()) // 2  # anchor pair read as close together as possible
        if anchor is not None:  # a later part keeps the first part's anchor: one clock per process
            wall, mono = anchor
        self._anchor = (wall, mono)
        raw = header_json(self.role, self.pid, self.rank, world_size, self.worker_id, wall, mono, extra).encode()
        raw += b" " * (-len(raw) % 8)
        return S.PREAMBLE.pack(S.MAGIC, len(raw), S.RECORD_SIZE) + raw

    # -- failure ------------------------------------------------------------------------------
    def _fail(self, why: str) -> None:
        self.ok = False
        self.buf = bytearray()
        try:
            if self._file is not None:
                self._file.close()
        except Exception:
            pass
        self._file = None
        warn_once(f"writer:{why}", f"lotus: tracing disabled in this process ({why}); training continues untraced")

    # -- definitions (rare; not the hot path) ---------------------------------------------------
    def _define(self, namespace: int, key: int, text: str) -> None:
        raw = text.encode()
        pack = self.pack
        out = b""
        for i in range(0, max(len(raw), 1), S.PAYLOAD_BYTES):
            chunk = raw[i : i + S.PAYLOAD_BYTES].ljust(S.PAYLOAD_BYTES, b"\0")
            # the payload occupies the five int64 fields
            out += pack(S.CTRL_DEFINE, namespace, key, 0, 0, 0, 0, 0)[:8] + chunk
        with self._lock:  # a rotation repeats exactly the definitions already in the closed part
            self.buf += out
            self._defined += out

    def name_id(self, name: str) -> int:
        """Id of a dynamically named event (an op); defines it in the file on first use."""
        nid = self._names.get(name)
        if nid is None:
            if self._next_dynamic > S.MAX_NAME_ID:
                return S.EVENTS_BY_NAME["sample"].id  # absurd number of distinct op names: fold
            nid = self._next_dynamic
            self._next_dynamic += 1
            self._names[name] = nid
            self._define(S.NS_EVENT_NAME, nid, name)
        return nid

    def define_loader(self, loader_id: int, description: dict) -> None:
        self._define(S.NS_LOADER, loader_id, json.dumps(description, default=str, separators=(",", ":")))

    def define_meta(self, meta: dict) -> None:
        self._define(S.NS_META, 0, json.dumps(meta, default=str, separators=(",", ":")))

    # -- flushing -----------------------------------------------------------------------------
    def drain(self) -> None:
        """Records kept elsewhere (``drains``) into ``buf``; a dead or failing drain is dropped."""
        for ref in list(self.drains):
            fn = ref()
            try:
                if fn is None:
                    self.drains.remove(ref)
                else:
                    fn()
            except Exception:
                pass

    def flush(self) -> None:
        if os.getpid() != self.pid:  # inherited through fork: the parent owns this file
            self.buf = bytearray()
            return
        if self.drains:
            self.drain()
        if not self.buf:
            return
        if not self.ok:
            self.buf = bytearray()
            return
        with self._lock:
            if self._file is None:  # closed meanwhile (the flusher thread lost a race with close())
                return
            data = bytes(self.buf)
            del self.buf[: len(data)]  # records appended meanwhile by another thread survive
            self._last_flush_ns = time.monotonic_ns()
            defined = len(self._defined)  # definitions in ``data`` (appended under this lock)
            try:
                view = memoryview(data)
                while view:
                    n = self._file.write(view)
                    self._part_bytes += n
                    view = view[n:]
                if (self.rotate_bytes and self._part_bytes >= self.rotate_bytes) or (
                        self.rotate_ns and self._last_flush_ns - self._part_start_ns >= self.rotate_ns):
                    self._rotate(defined)
            except Exception as exc:
                self._fail(f"cannot write {self.path}: {exc}")

    def _rotate(self, defined: int) -> None:
        """Close the current part and continue in the next (under ``_lock``, after a full write)."""
        old = self.path
        self._file.close()
        self._part += 1
        base = Path(self._base_path)
        stem = base.name[: -len(S.FILE_SUFFIX)]
        path = base.with_name(f"{stem}.part{self._part:04d}{S.FILE_SUFFIX}")
        self._file = open(path, "xb", buffering=0)  # noqa: SIM115 - lives as long as the writer
        self._path = os.fspath(path)
        extra = {**(self._header_extra["extra"] or {}), "part": self._part,
                 "repeated_defines": defined // S.RECORD_SIZE}
        head = self._preamble(self._header_extra["world_size"], extra, anchor=self._anchor)
        self._part_bytes = self._file.write(head + bytes(self._defined[:defined]))
        self._part_start_ns = time.monotonic_ns()
        if self.compress_parts:
            threading.Thread(target=compress_part, args=(old,), name="lotus-trace-compress", daemon=True).start()

    def maybe_flush(self, now_ns: int | None = None) -> None:
        """Flush when the buffer is over its size bound or older than one second."""
        now = now_ns or time.monotonic_ns()
        if len(self.buf) >= self.flush_bytes or now - self._last_flush_ns >= _FLUSH_INTERVAL_NS:
            self.flush()

    def close(self) -> None:
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True
        for fn in self.closers:
            try:
                fn()
            except Exception:
                pass
        try:
            self.drain()  # before the end marker
            if self.ok:
                self.buf += self.pack(S.CTRL_END, 0, 0, time.monotonic_ns(), 0, 0, 0, time.time_ns())
            self.flush()
            with self._lock:
                if self._file is not None:
                    self._file.close()
                    self._file = None
        except Exception as exc:
            self._fail(f"cannot close {self.path}: {exc}")


def compress_part(path: Path) -> Path | None:
    """zstd-compress a closed trace part into ``<path>.zst`` (temporary name, then rename; the plain file
    is removed only then). Returns the new path, or None (one warning) when it failed."""
    tmp = path.with_name(path.name + ".zst.tmp")
    try:
        import pyarrow as pa

        with open(path, "rb") as src, pa.output_stream(str(tmp), compression="zstd") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
        out = path.with_name(path.name + ".zst")
        os.replace(tmp, out)
        os.unlink(path)
        return out
    except Exception as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        warn_once(f"compress:{path}", f"lotus: could not compress {path} ({exc}); kept uncompressed")
        return None


# -- the flusher thread: nothing waits for exit ----------------------------------------------------
class _FlushTimer:
    """One daemon thread per process that writes every live writer's buffer every ``_TIMER_PERIOD_S``.

    The hot path never takes a lock: appends (``buf += record``) and the flusher's ``bytes(buf)`` /
    ``del buf[:n]`` are single in-place bytearray operations, atomic under the GIL, and a flush only
    removes the prefix it wrote. So records reach the file within about a second even while the
    training loop is blocked waiting for data or a worker is inside a long batch.
    """

    def __init__(self) -> None:
        self._writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pid = None
        self._wake = threading.Event()

    def add(self, writer: TraceWriter, bare: bool = False) -> None:
        """Writes ``writer``'s buffer every period from now on; starts this process's thread if not yet.
        ``bare`` (a DataLoader worker, before its first batch): a thread of the ``_thread`` module, which
        ``threading.Thread.start`` is built on, without the bookkeeping and the wait for it to run (0.1 ms of
        CPU in a forked child against 0.6-0.9 ms, on a VM): a daemon all the same, unnamed."""
        try:
            with self._lock:
                self._writers.add(writer)
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    if bare:
                        _thread.start_new_thread(self._run, ())
                    else:
                        threading.Thread(target=self._run, name="lotus-trace-flusher", daemon=True).start()
        except Exception as exc:  # e.g. no threads at interpreter shutdown: flushing on bounds still works
            warn_once("flusher", f"lotus: no background trace flushing ({exc!r})")

    def _run(self) -> None:
        pid = os.getpid()
        while not self._wake.wait(_TIMER_PERIOD_S):
            if os.getpid() != pid:
                return
            with self._lock:
                writers = list(self._writers)
            for w in writers:
                try:
                    if (w.buf or w.drains) and not w._closed:
                        w.flush()
                except Exception:  # the writer disables itself with a warning; never raise here
                    pass

    def after_fork(self) -> None:
        # the thread did not survive the fork; the child starts its own with its first writer
        self._lock = threading.Lock()
        self._writers = weakref.WeakSet()
        self._pid = None


_timer = _FlushTimer()


# -- process-wide main-process writer --------------------------------------------------------
_main_writers: dict[str, TraceWriter] = {}
_main_lock = threading.Lock()


def main_writer(trace_dir: str | os.PathLike, *, rank: int = 0, world_size: int = 1) -> TraceWriter:
    """The main process's writer for ``trace_dir`` (one file per process and directory)."""
    key = os.path.abspath(os.fspath(trace_dir))
    with _main_lock:
        w = _main_writers.get(key)
        if w is None or w.pid != os.getpid():
            w = TraceWriter(key, "main", rank=rank, world_size=world_size)
            _main_writers[key] = w
        return w


def close_main_writers() -> None:
    with _main_lock:
        writers = list(_main_writers.values())
        _main_writers.clear()
    for w in writers:
        w.close()


def _after_fork() -> None:
    # A forked child must never write the parent's buffered records into the parent's file.
    global _main_lock
    _main_writers.clear()
    _main_lock = threading.Lock()
    _timer.after_fork()


atexit.register(close_main_writers)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
