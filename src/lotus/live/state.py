"""What the live view keeps of a running job: a sliding window of the events it needs.

Everything is on one time base: ``time.monotonic_ns()`` of *this* host. Files written on this host
(same ``boot_id``) need no conversion; files of another host are shifted through their wall-clock
anchors. Memory is bounded by the retention window (60 s by default), not by the length of the job:

* ``rows``: the batch-level events (a few per batch) as one structured array (:data:`ROW_DTYPE`),
  pruned to the retention window on every :meth:`LiveState.commit`;
* ``ops``: per-sample op times summed into one-second buckets per (rank, loader, op name);
* per-batch sample counts (``sample`` events) are folded into one ``SAMPLE_COUNT`` row per batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from lotus.trace import schema as S

SEC = 1_000_000_000
SAMPLE_COUNT = -10  # kind of a synthetic row: arg = number of `sample` events of (loader, epoch, batch)
FLUSH_LAG_NS = 1_200_000_000  # the main process flushes at most ~1 s after an event (+ margin)

ROW_DTYPE = np.dtype([("kind", "<i2"), ("rank", "<i2"), ("loader", "<i2"), ("worker", "<i2"),
                      ("epoch", "<i4"), ("start", "<i8"), ("dur", "<i8"), ("batch", "<i8"), ("arg", "<i8")])

KEPT_EVENTS = (S.EV_DISPATCH, S.EV_WAIT, S.EV_CONSUMED, S.EV_ARRIVE, S.EV_FETCH, S.EV_EXHAUSTED,
               S.EV_COLLATE, S.EV_GPU_WAIT, S.EV_EPOCH_START, S.EV_EPOCH_END)
_KEEP = np.zeros(S.MAX_NAME_ID + 1, bool)
_KEEP[list(KEPT_EVENTS)] = True


@dataclass
class FileInfo:
    """What the state knows of one trace file (the tailer keeps it up to date)."""

    path: str
    role: str
    rank: int
    worker_id: int
    pid: int
    boot_id: str
    local: bool  # written on this host: its times are this host's monotonic clock
    ended: bool = False  # CTRL_END seen: closed cleanly
    last_ns: int = 0  # latest event end read from it (state time base)
    records: int = 0  # event records read from it
    host: str = ""  # the hostname its header names


@dataclass
class LiveState:
    """Sliding window of a run's events. Fed by :class:`lotus.live.tail.Tailer`, read by ``snapshot``."""

    retention_ns: int = 60 * SEC
    rows: np.ndarray = field(default_factory=lambda: np.empty(0, ROW_DTYPE))
    ops: dict[tuple[int, int, str], dict[int, list[int]]] = field(default_factory=dict)
    loaders: dict[tuple[int, int], dict] = field(default_factory=dict)  # (rank, loader) -> description
    first_ns: dict[tuple[int, int], int] = field(default_factory=dict)  # first event seen per loader
    consumed: dict[tuple[int, int], int] = field(default_factory=dict)  # batches the loop received, all read so far
    files: dict[str, FileInfo] = field(default_factory=dict)
    latest_ns: int = 0  # latest event end seen in any file
    _pending: list[np.ndarray] = field(default_factory=list)

    # -- feeding ------------------------------------------------------------------------------
    def ingest(self, info: FileInfo, events: np.ndarray, shift_ns: int, names: dict[int, str]) -> None:
        """Add event records (``name_id >= 0``, file dtype) of one file; ``names``: its op names."""
        if len(events) == 0:
            return
        ids = events["name_id"]
        start = events["start_ns"] + shift_ns
        end = start + np.maximum(events["dur_ns"], 0)
        last = int(end.max())
        info.last_ns = max(info.last_ns, last)
        info.records += len(events)
        self.latest_ns = max(self.latest_ns, last)
        for loader in np.unique(events["loader"]).tolist():
            key = (info.rank, loader)
            mine = events["loader"] == loader
            t = int(start[mine].min())
            if key not in self.first_ns or t < self.first_ns[key]:
                self.first_ns[key] = t
            n = int(np.count_nonzero(ids[mine] == S.EV_CONSUMED))
            if n:
                self.consumed[key] = self.consumed.get(key, 0) + n
        keep = _KEEP[ids]
        if keep.any():
            self._pending.append(self._rows(events[keep], start[keep], info))
        samples = ids == S.EV_SAMPLE
        if samples.any():
            self._pending.append(self._sample_counts(events[samples], start[samples], info))
        is_op = ids >= S.FIRST_DYNAMIC_ID
        if is_op.any():
            self._add_ops(events[is_op], start[is_op], info, names)

    @staticmethod
    def _rows(ev: np.ndarray, start: np.ndarray, info: FileInfo) -> np.ndarray:
        rows = np.empty(len(ev), ROW_DTYPE)
        rows["kind"] = ev["name_id"]
        rows["rank"] = info.rank
        rows["loader"] = ev["loader"]
        rows["worker"] = info.worker_id
        rows["epoch"] = ev["epoch"]
        rows["start"] = start
        rows["dur"] = ev["dur_ns"]
        rows["batch"] = ev["batch_id"]
        rows["arg"] = ev["arg"]
        return rows

    @staticmethod
    def _sample_counts(ev: np.ndarray, start: np.ndarray, info: FileInfo) -> np.ndarray:
        # one int64 key per (loader, epoch, batch): np.unique on it is ~10x faster than on records
        key = ((ev["loader"].astype(np.int64) & 0x7FFF) << 48) | ((ev["epoch"].astype(np.int64) & 0xFFFF) << 32) \
            | (ev["batch_id"] & 0xFFFFFFFF)
        uniq, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        first = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first, inv, start)
        rows = np.zeros(len(uniq), ROW_DTYPE)
        rows["kind"] = SAMPLE_COUNT
        rows["rank"] = info.rank
        rows["loader"] = uniq >> 48
        rows["worker"] = info.worker_id
        rows["epoch"] = (uniq >> 32) & 0xFFFF
        rows["start"] = first
        rows["batch"] = uniq & 0xFFFFFFFF
        rows["arg"] = counts
        return rows

    def _add_ops(self, ev: np.ndarray, start: np.ndarray, info: FileInfo, names: dict[int, str]) -> None:
        sec = start // SEC
        base = int(sec.min())
        key = ((ev["loader"].astype(np.int64) & 0x7FFF) << 48) | (ev["name_id"].astype(np.int64) << 32) | (sec - base)
        uniq, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        total = np.bincount(inv, weights=np.maximum(ev["dur_ns"], 0), minlength=len(uniq))
        for k, n, t in zip(uniq.tolist(), counts.tolist(), total.tolist(), strict=True):
            nid = (k >> 32) & 0xFFFF
            name = names.get(nid, f"unknown:{nid}")
            bucket = self.ops.setdefault((info.rank, k >> 48, name), {}).setdefault(base + (k & 0xFFFFFFFF), [0, 0])
            bucket[0] += int(t)
            bucket[1] += n

    def commit(self) -> None:
        """Merge what was ingested since the last commit and drop what fell out of the retention window."""
        horizon = self.latest_ns - self.retention_ns
        rows = self.rows
        if len(rows):
            alive = rows["start"] + np.maximum(rows["dur"], 0) >= horizon
            if not alive.all():
                rows = rows[alive]
        if self._pending:
            rows = np.concatenate([rows, *self._pending])
            self._pending = []
        self.rows = rows
        old_sec = horizon // SEC - 1
        for key in list(self.ops):
            buckets = self.ops[key]
            for sec in [s for s in buckets if s < old_sec]:
                del buckets[sec]
            if not buckets:
                del self.ops[key]

    # -- reading --------------------------------------------------------------------------------
    @property
    def has_local_files(self) -> bool:
        return any(f.local for f in self.files.values())

    def now_ns(self, live: bool, mono_ns: int | None = None) -> int:
        """The end of the window a snapshot should use.

        A live job on this host: this host's monotonic clock, held back to what the open main-process
        files are known to cover (they are flushed at most ~1 s after an event), so that a window is
        never cut short by records not yet written. Otherwise (a finished job, or files of another
        host): the latest event time seen.
        """
        if not (live and self.has_local_files):
            return self.latest_ns
        t = time.monotonic_ns() if mono_ns is None else mono_ns
        cover = [max(f.last_ns, t - FLUSH_LAG_NS) for f in self.files.values() if f.role == "main" and not f.ended]
        return min([t, *cover])
