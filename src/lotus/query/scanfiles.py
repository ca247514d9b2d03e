"""One pass of the out-of-core scan over some files of a run (:func:`scan_files`), and what it keeps
(:class:`ScanPart`): the unit of work that :mod:`lotus.query.scan` runs in one process, or spreads over
processes or a cluster's workers (:mod:`lotus.query.parallel`) and merges (:mod:`lotus.query.scanmerge`).

A part is what :func:`lotus.query.scan.scan_run` kept while reading its files, in a name table of its
own (codes in the order the part met the names, the built-in events first): the kept event rows, the
file entries, per-op moments and, for each chunk, the per-op (count, sum, sum of squares) that fed them
(so that the merge can replay the serial path's floating-point merges in its order), per-op histograms,
exact minima and maxima, per-epoch and per-rank op totals, the first row of each code, a record census
and the folded batch-level columns (:class:`lotus.query.batchparts.BatchParts`). Everything is picklable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.query.opengine import OP_BUILTINS
from lotus.trace import schema as S
from lotus.trace.native import read_header

_log = logging.getLogger("lotus.trace")
PER_SAMPLE_IDS = (S.EV_SAMPLE, S.EV_LOAD, S.EV_TRANSFORM)
KEEP_ROWS = 1 << 16  # kept rows of a chunk handled at once (a slice of ~10 MB of temporaries)


@dataclass(frozen=True)
class ScanContext:
    """What every part of one scan shares (picklable): the run, clocks, loader offsets, what to keep."""

    where: str  # the run's directory (messages)
    offsets: dict  # boot id -> wall - monotonic (lotus.trace.events.clock_offsets)
    per_process: dict  # file -> loader id offset (lotus.trace.events.loader_offsets)
    fold: bool = True  # fold the batch-level events into per-batch columns
    columns: frozenset | None = None  # the per-batch columns kept (None: all)
    op_stats: bool = True
    census: bool = False
    replay: bool = False  # record each chunk's per-op sums (a part to be merged with others)
    op_reduce: str = ""  # "batches": per-batch op sums; "values": and every op duration (lotus.query.opreduce)


@dataclass
class ScanPart:
    """What one :func:`scan_files` kept (module doc); ``acc`` in the part's own codes."""

    acc: object  # lotus.trace.events.Accumulator: names, kept rows (parts), file entries
    slot_codes: list[int]
    moments: object  # lotus.query.moments._Moments
    chunks: list = field(default_factory=list)  # per chunk with ops: (n, sum, sum of squares) by slot
    by_epoch: dict = field(default_factory=dict)
    by_rank: dict = field(default_factory=dict)
    first: dict = field(default_factory=dict)  # code -> first row (all records counted) in the part
    rows: int = 0  # records read
    census: object = None  # lotus.query.census.Census
    batch_parts: object = None  # lotus.query.batchparts.BatchParts
    op_reduce: object = None  # lotus.query.opreduce.OpReduce (ScanContext.op_reduce)


class _Codes:
    """The part's name table and, by code, whether a record is kept as a row and its op slot."""

    def __init__(self, acc, where: str):
        self.acc, self.where = acc, where
        self.small = np.zeros(S.MAX_NAME_ID + 1 + 1024, bool)  # by code: kept as an event row
        self.slot_of = np.full(self.small.size, -1, np.int32)
        self.slot_codes: list[int] = []
        self.n = -1

    def code_of(self, name: str, cat: str) -> int:
        return self.acc.code(name, cat)

    def refresh(self) -> None:
        from lotus.errors import InputError

        if len(self.acc.names) == self.n:
            return
        if len(self.acc.names) > self.small.size:
            raise InputError("more than 33,000 distinct event names", self.where)
        for c, (nm, cat) in enumerate(zip(self.acc.names, self.acc.cats, strict=True)):
            is_op = cat == S.OP_CAT or nm in OP_BUILTINS
            self.small[c] = not (cat == S.OP_CAT or c in PER_SAMPLE_IDS)
            if is_op and self.slot_of[c] < 0:
                self.slot_of[c] = len(self.slot_codes)
                self.slot_codes.append(c)
        self.n = len(self.acc.names)


def scan_files(paths: list[Path], ctx: ScanContext) -> ScanPart:
    """Scan ``paths`` (in this order; every part of a process among them) into a :class:`ScanPart`."""
    from lotus.query.batchparts import BatchParts
    from lotus.query.census import Census
    from lotus.query.moments import _epoch_sums, _Moments, _rank_sums
    from lotus.trace.chunks import record_chunks
    from lotus.trace.events import Accumulator

    acc = Accumulator()
    codes = _Codes(acc, ctx.where)
    part = ScanPart(acc, codes.slot_codes, _Moments(), census=Census() if ctx.census else None,
                    batch_parts=BatchParts(ctx.where, ctx.columns) if ctx.fold else None)
    parts, moments = part.batch_parts, part.moments
    if ctx.op_reduce and ctx.op_stats:
        from lotus.query.opreduce import OpReduce

        part.op_reduce = OpReduce(values=ctx.op_reduce == "values")
    reduce = part.op_reduce
    lookups = parts.codes(codes.small.size) if ctx.fold else None
    spans: dict = {}
    for p in paths:
        n_events = n_legacy = 0
        fs = None
        for arr, code, fs in record_chunks(p, ctx.offsets, ctx.per_process.get(p, 0), codes.code_of, spans=spans):
            codes.refresh()
            per_code = np.bincount(code, minlength=1)
            if part.census is not None:
                part.census.add(arr, per_code, fs.consts["rank"], fs.shift)
            for c in np.flatnonzero(per_code).tolist():
                if c not in part.first:
                    part.first[c] = part.rows + int(np.argmax(code == c))
            idx = np.flatnonzero(codes.small[code])  # kept rows: few, but all of a main file's
            for i in range(0, len(idx), KEEP_ROWS):  # in slices: their temporaries stay small
                n_legacy += _keep(acc, parts, arr, code, idx[i: i + KEEP_ROWS], fs, lookups)
            slot = codes.slot_of[code]
            ops = np.flatnonzero(slot >= 0)
            if len(ops) and ctx.op_stats:
                sl, dur, ep = slot[ops], arr["dur_ns"][ops], arr["epoch"][ops]
                stats = moments.chunk(sl, dur, len(codes.slot_codes))
                moments.merge(*stats)
                if ctx.replay:
                    part.chunks.append(stats)
                _epoch_sums(part.by_epoch, ep, sl, dur, len(codes.slot_codes), stats[1])
                _rank_sums(part.by_rank, fs.consts["rank"], stats[1])
                if reduce is not None:
                    reduce.add(fs.consts["rank"], arr["loader"][ops].astype(np.int64) + fs.loader_offset, ep,
                               arr["batch_id"][ops], sl, dur, len(codes.slot_codes))
            n_events += len(arr)
            part.rows += len(arr)
        acc.files.append(_file_entry(p, fs, n_events, ctx.per_process.get(p, 0)))
        if n_legacy and part.census is not None:
            part.census.legacy_fetches(n_legacy)
        if n_legacy:
            _log.info("%s: %d 'fetch' events flagged FETCH_STOP (written by lotus <= 0.1) read as 'exhausted'",
                      p, n_legacy)
        if fs is None or not fs.consts["clean"]:
            _log.info("%s: no end record (process killed or still running); %d events read", p, n_events)
    codes.refresh()
    if reduce is not None:
        reduce.finish()
    return part


def _keep(acc, parts, arr, code, idx, fs, lookups) -> int:
    """Add the rows ``idx`` of a chunk (events that are not per-sample detail) to ``acc``, folding the
    batch-level ones into ``parts`` (most of those then keep no row); returns the legacy fetches read
    as ``exhausted``."""
    kc = code[idx]
    karg = arr["arg"][idx]
    legacy = (kc == S.EV_FETCH) & (karg > 0) & ((karg & S.FETCH_STOP) != 0)
    if legacy.any():  # lotus <= 0.1: exhaustion was a flagged fetch (as load_events reads it)
        kc[legacy] = S.EV_EXHAUSTED
        karg = np.where(legacy, karg & ~S.FETCH_STOP, karg)
    lo = arr["loader"][idx].astype(np.int32) + fs.loader_offset
    start, dur, bid, ep = arr["start_ns"][idx] + fs.shift, arr["dur_ns"][idx], arr["batch_id"][idx], arr["epoch"][idx]
    folded = lookups[0][kc] & (bid >= 0) if parts is not None else None
    if parts is not None and folded.any():
        f = np.flatnonzero(folded)
        parts.add(fs.consts["rank"], kc[f], bid[f], lo[f], ep[f], {"worker_id": fs.consts["worker_id"],
                  "pid": fs.consts["pid"], "start_ns": start[f], "dur_ns": dur[f], "arg": karg[f],
                  "sample": arr["sample"][idx][f]})
        failed = (kc == S.EV_FETCH) & (karg > 0) & ((karg & S.FETCH_ERROR) != 0)  # rows of fetch_outcomes
        gone = folded & lookups[1][kc] & ~failed
        if gone.any():
            parts.dropped(ep[gone], start[gone], dur[gone])
            k = np.flatnonzero(~gone)
            idx, kc, karg, lo, start, dur, bid, ep = (x[k] for x in (idx, kc, karg, lo, start, dur, bid, ep))
    acc.add(len(idx), code=kc, start_ns=start, dur_ns=dur, batch_id=bid, sample=arr["sample"][idx], arg=karg,
            loader=lo, epoch=ep, **{c: fs.consts[c] for c in ("pid", "role", "worker_id", "rank")})
    return int(legacy.sum())


def _file_entry(p: Path, fs, n_events: int, loader_offset: int) -> dict:
    """The events' ``attrs["files"]`` entry of ``p`` (``fs``: the state its last chunk left; None: no record)."""
    if fs is None:
        h, defines, clean = read_header(p)[0], {}, False
    else:
        h, defines, clean = fs.consts["header"], fs.consts["defines"], fs.consts["clean"]
    from lotus.trace.events import loader_descriptions

    loaders = loader_descriptions(defines, loader_offset, p)
    return {"path": str(p), "format": "lotus", "role": h.get("role", "main"), "pid": h.get("pid"),
            "rank": h.get("rank", 0), "worker_id": h.get("worker_id", -1), "events": n_events,
            "clean_close": clean, "loaders": loaders, "world_size": h.get("world_size", 1),
            "hostname": h.get("hostname"), "torch_version": h.get("torch_version")}
