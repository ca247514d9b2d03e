"""Incremental reading of trace files while their processes are still writing them.

:class:`Tailer` keeps one byte offset per file and reads, on each :meth:`Tailer.poll`, only the whole
records appended since the last one (a record being written, torn at the end of the file, waits for
the next poll). Files that appear later (workers of a new epoch, another rank) are picked up by the
directory scan of each poll; a file whose ``CTRL_END`` record was read is closed and never read again.

Cheap on multi-GB traces: when a file's unread part is large (the first poll of a long job, or a view
that fell behind), the reader does not read it. It bisects the records on their start time to the
retention horizon (the last 60 s by default) and starts there. Definitions (op names, loader
descriptions) written before that point are then read lazily: only when an event of the tail needs
one, by scanning the skipped part for control records, in order, until everything needed is found.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.live.job import local_boot_id
from lotus.live.state import SEC, FileInfo, LiveState
from lotus.trace import schema as S
from lotus.trace.events import LOADER_STRIDE
from lotus.trace.native import RECORD_DTYPE, read_header
from lotus.trace.packed import expand_main_batches

_log = logging.getLogger("lotus.live")
RS = S.RECORD_SIZE
SKIP_BYTES = 8 << 20  # an unread part larger than this is bisected to the horizon instead of read whole
SCAN_RECORDS = 1 << 18  # records per read when scanning a skipped part for definitions (12 MiB)
_PROBE = 256  # records read around a bisection point
_MARGIN_NS = 2 * SEC


@dataclass
class FileTail:
    """Reading position and definitions of one trace file."""

    path: Path
    info: FileInfo
    data_offset: int  # byte offset of the first record
    offset: int  # next byte to read (always at a record boundary)
    shift_ns: int  # added to the file's times to land on the state's time base
    size: int = 0  # file size at the last poll
    skipped: list[list[int]] = field(default_factory=list)  # [start, end) byte ranges never read
    chunks: dict[tuple[int, int], list[bytes]] = field(default_factory=dict)  # DEFINE payloads
    names: dict[int, str] = field(default_factory=dict)  # op id -> name
    loaders: dict[int, dict] = field(default_factory=dict)  # loader id -> description
    loader_offset: int = 0  # added to its loader ids: the k-th process of a rank (see events.loader_offsets)


class Tailer:
    """Follows the trace files directly inside ``run_dir`` and feeds a :class:`LiveState`."""

    def __init__(self, run_dir: str | os.PathLike, *, retention_s: float = 60.0, state: LiveState | None = None):
        self.run_dir = Path(run_dir)
        self.state = state if state is not None else LiveState(retention_ns=int(retention_s * SEC))
        self.tails: dict[str, FileTail] = {}
        self.boot_id = local_boot_id()
        self._local_off = time.time_ns() - time.monotonic_ns()
        self._domain_shift: dict[str, int] = {}
        self._bad: set[str] = set()
        self._owners: dict[int, set[int]] = {}  # rank -> pids of its main processes seen so far
        self.bytes_read = 0

    # -- files ----------------------------------------------------------------------------------
    def _new_paths(self) -> list[Path]:
        try:
            with os.scandir(self.run_dir) as it:
                names = [e.name for e in it if e.name.endswith(S.FILE_SUFFIX)]
        except OSError:
            return []
        return [self.run_dir / n for n in sorted(names) if n not in self.tails and n not in self._bad]

    def _open(self, path: Path) -> FileTail | None:
        try:
            header, data_offset = read_header(path)
        except (InputError, OSError) as exc:
            if isinstance(exc, InputError) and ("truncated" in str(exc) or "empty" in str(exc)):
                return None  # still being created: try again at the next poll
            self._bad.add(path.name)
            _log.warning("%s; file skipped", exc)
            return None
        boot = str(header.get("boot_id", ""))
        local = boot == self.boot_id
        off = int(header["anchor_wall_ns"]) - int(header["anchor_mono_ns"])
        shift = 0 if local else self._domain_shift.setdefault(boot, off - self._local_off)
        info = FileInfo(path=str(path), role=str(header.get("role", "main")), rank=int(header.get("rank", 0)),
                        worker_id=int(header.get("worker_id", S.NO_ID)), pid=int(header.get("pid", -1)),
                        boot_id=boot, local=local, last_ns=int(header["anchor_mono_ns"]) + shift,
                        host=str(header.get("hostname", "")))
        self.state.files[path.name] = info
        return FileTail(path, info, data_offset, data_offset, shift, loader_offset=self._loader_offset(header))

    def _register_owner(self, path: Path) -> None:
        try:
            header, _ = read_header(path)
        except (InputError, OSError):
            return
        if header.get("role") == "main":
            self._owners.setdefault(int(header.get("rank", 0)), set()).add(int(header.get("pid", -1)))

    def _loader_offset(self, header: dict) -> int:
        """As the readers do (:func:`lotus.trace.events.loader_offsets`): the k-th main process of a rank
        (by pid, among those seen so far) and its workers add k * LOADER_STRIDE to their loader ids."""
        rank = int(header.get("rank", 0))
        owner = int(header.get("pid", -1)) if header.get("role") == "main" else int(header.get("main_pid", -1))
        order = sorted(self._owners.get(rank, ()))
        return order.index(owner) * LOADER_STRIDE if owner in order else 0

    # -- polling --------------------------------------------------------------------------------
    def poll(self) -> int:
        """Read what was appended since the last poll; returns the number of new event records."""
        new = self._new_paths()
        for p in new:  # every main process first, so that the loader offsets follow the readers'
            self._register_owner(p)
        for p in new:
            tail = self._open(p)
            if tail is not None:
                self.tails[p.name] = tail
        n = 0
        for tail in self.tails.values():
            if not tail.info.ended:
                n += self._poll_file(tail)
        self.state.commit()
        return n

    def _poll_file(self, tail: FileTail) -> int:
        try:
            size = os.stat(tail.path).st_size
        except FileNotFoundError:
            tail.info.ended = True  # deleted under us
            return 0
        if size == tail.size:
            return 0
        tail.size = size
        end = tail.data_offset + (size - tail.data_offset) // RS * RS
        if end <= tail.offset:
            return 0
        with open(tail.path, "rb") as f:
            if end - tail.offset > SKIP_BYTES:
                start = self._horizon_offset(f, tail, end)
                if start > tail.offset:
                    tail.skipped.append([tail.offset, start])
                    tail.offset = start
            f.seek(tail.offset)
            raw = f.read(end - tail.offset)
        n = len(raw) // RS
        if n and int.from_bytes(raw[(n - 1) * RS:(n - 1) * RS + 2], "little", signed=True) == S.EV_MAIN_BATCH:
            n -= 1  # a packed batch record: read with the loop record written right after it
        self.bytes_read += n * RS
        tail.offset += n * RS
        events = expand_main_batches(self._controls(tail, np.frombuffer(raw, RECORD_DTYPE, count=n)), tail.path)
        if tail.loader_offset and len(events):
            events = events.copy()
            events["loader"] += tail.loader_offset
        if tail.skipped and len(events):
            self._resolve(tail, events)
        self.state.ingest(tail.info, events, tail.shift_ns, tail.names)
        return len(events)

    # -- control records --------------------------------------------------------------------------
    def _controls(self, tail: FileTail, arr: np.ndarray) -> np.ndarray:
        """Take the control records out of ``arr`` (definitions, end); returns the events."""
        is_ctrl = arr["name_id"] < 0
        if not is_ctrl.any():
            return arr
        ctrl = arr[is_ctrl]
        raw = ctrl.view(np.uint8).reshape(len(ctrl), RS)
        touched = set()
        for i, rec in enumerate(ctrl.tolist()):  # rare: a few per file
            if rec[0] == S.CTRL_DEFINE:
                key = (rec[1], rec[2] + tail.loader_offset if rec[1] == S.NS_LOADER else rec[2])
                tail.chunks.setdefault(key, []).append(raw[i, 8:].tobytes())
                touched.add(key)
            elif rec[0] == S.CTRL_END:
                tail.info.ended = True
        for ns, key in touched:
            text = b"".join(tail.chunks[(ns, key)]).rstrip(b"\0").decode(errors="replace")
            if ns == S.NS_EVENT_NAME:
                tail.names[key] = f"{text} (op)" if text in S.EVENTS_BY_NAME else text
            elif ns == S.NS_LOADER:
                try:
                    desc = json.loads(text)
                except ValueError:  # the rest of it comes with the next read (or it is damaged)
                    continue
                tail.loaders[key] = desc
                self.state.loaders[(tail.info.rank, key)] = desc
        return arr[~is_ctrl]

    def _needs(self, tail: FileTail, events: np.ndarray) -> tuple[set[int], set[int]]:
        ids = events["name_id"]
        ops = set(np.unique(ids[ids >= S.FIRST_DYNAMIC_ID]).tolist()) - tail.names.keys()
        loaders: set[int] = set()
        if tail.info.role == "main":
            described = {k for (r, k) in self.state.loaders if r == tail.info.rank}
            loaders = set(np.unique(events["loader"]).tolist()) - described
        return ops, loaders

    def _resolve(self, tail: FileTail, events: np.ndarray) -> None:
        """Scan the skipped parts of the file for the definitions ``events`` need, in file order."""
        ops, loaders = self._needs(tail, events)
        if not (ops or loaders):
            return
        chunk = _PROBE * 4  # definitions usually sit at the start: small reads first, then larger ones
        with open(tail.path, "rb") as f:
            while tail.skipped:
                lo, hi = tail.skipped[0]
                count = min((hi - lo) // RS, chunk)
                chunk = min(2 * chunk, SCAN_RECORDS)
                f.seek(lo)
                arr = np.frombuffer(f.read(count * RS), RECORD_DTYPE, count=count)
                self.bytes_read += count * RS
                self._controls(tail, arr)
                tail.skipped[0][0] = lo + count * RS
                if tail.skipped[0][0] >= hi:
                    tail.skipped.pop(0)
                if count and arr["name_id"][-1] < 0:
                    continue  # a definition may go on in the next chunk
                ops, loaders = self._needs(tail, events)
                if not (ops or loaders):
                    return
        if ops:
            _log.info("%s: op ids %s are not defined in the file", tail.path, sorted(ops))

    # -- skipping ---------------------------------------------------------------------------------
    def _horizon_offset(self, f, tail: FileTail, end: int) -> int:
        """Byte offset of the first record that starts after the retention horizon (approximately:
        records are appended in the order events end), backed up over control records so that a
        definition is never split."""
        n_lo = (tail.offset - tail.data_offset) // RS
        n_hi = (end - tail.data_offset) // RS

        def block(i: int, count: int) -> np.ndarray:
            f.seek(tail.data_offset + i * RS)
            return np.frombuffer(f.read(count * RS), RECORD_DTYPE)

        tail_block = block(max(n_lo, n_hi - _PROBE), n_hi - max(n_lo, n_hi - _PROBE))
        ev = tail_block[tail_block["name_id"] >= 0]
        last = int(ev["start_ns"].max()) + tail.shift_ns if len(ev) else self.state.latest_ns
        now = time.monotonic_ns() if tail.info.local else self.state.latest_ns
        target = max(last, now) - self.state.retention_ns - _MARGIN_NS - tail.shift_ns
        lo, hi = n_lo, n_hi
        while lo < hi:
            mid = (lo + hi) // 2
            b = block(mid, min(_PROBE, n_hi - mid))
            starts = b["start_ns"][b["name_id"] >= 0]
            if len(starts) == 0 or starts[0] < target:
                lo = mid + 1
            else:
                hi = mid
        i = lo
        while i > n_lo:
            count = min(_PROBE, i - n_lo)
            is_ctrl = block(i - count, count)["name_id"] < 0
            trailing = count if is_ctrl.all() else count - 1 - int(np.flatnonzero(~is_ctrl)[-1])
            i -= trailing
            if trailing < count:
                break
        if i > n_lo and block(i, 1)["name_id"][:1].tolist() == [S.EV_MAIN_LOOP]:
            i -= 1  # never between a packed batch record and its loop record
        return tail.data_offset + i * RS
