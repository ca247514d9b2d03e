"""The out-of-core engine: a run read in fixed-size chunks, in memory bounded by its batches, not its events.

``scan_run(run)`` reads every ``.lotustrace`` file of a run in chunks of :data:`CHUNK_RECORDS` records
(numpy, at memory speed) and keeps:

* the batch-level events folded into per-batch columns (:mod:`lotus.trace.batchparts`): the batches
  table, and so waits and verdicts, is the one :func:`lotus.trace.batches.batches_from_events` makes
  from the full events, exactly;
* the other events that are *not* per-sample detail (``sample``, ``load``, ``transform`` and the op
  events are left out; of the batch-level ones, ``fetch``, ``exhausted`` and the GPU events) as an
  events DataFrame with the columns of :func:`lotus.trace.load_events` (outcomes, detail share, GPU
  telemetry, markers);
* per-sample event counts per batch key (the ``n_samples`` fallback of batches without a collate);
* per op (``load``, every transform op, ``transform``, ``sample``, ``collate``): count, sum, variance
  (Chan's merge of per-chunk moments), exact min and max, and a log-histogram of durations
  (:data:`BINS_PER_OCTAVE` bins per power of two) for the quantiles.

Exact vs approximate (see docs/analysis.md, "Large traces"): counts, sums, means, min and max are
exact; std agrees with numpy's to ~1e-12; the quantiles (median, p25, p75, p90, p99) are read off the
histogram, within 0.04% of numpy's (linear interpolation between neighbouring ranks, each rank's value
being its bin's geometric centre, clipped to [min, max]). Durations <= 0 fall in one bin valued 0.

Excluding batches (failed or exhausted fetches, ``--remove-outliers``) needs a second scan, made only
when there is something to exclude (:meth:`OpEngine.op_table`).

The per-sample events are attached as ``events.attrs["op_engine"]`` (an :class:`OpEngine`);
:func:`lotus.analysis.stats.op_durations` and its users read per-op statistics from it.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.trace import schema as S
from lotus.trace.batchparts import BatchParts, SparseBatchIds
from lotus.trace.discover import Run
from lotus.trace.moments import _epoch_sums, _Moments, hist_quantiles
from lotus.trace.native import derive_sample_spans, read_header
from lotus.trace.original import release_freed_memory
from lotus.trace.parts import iter_records, mark_continued, stitch

_log = logging.getLogger("lotus.trace")
CHUNK_RECORDS = 1 << 20  # 48 MiB of records (as load_events: op moments and derived spans are per chunk)
PER_SAMPLE_IDS = (S.EV_SAMPLE, S.EV_LOAD, S.EV_TRANSFORM)
OP_BUILTINS = ("load", "transform", "sample", "collate")
_ROLES = ["main", "worker"]


class OpEngine:
    """Per-op statistics of one scanned run (see the module doc); survives DataFrame attrs copies."""

    def __init__(self, paths: list[Path], offsets: dict, loader_offsets: dict, names: list[str],
                 slot_codes: list[int], moments: _Moments, first: dict[int, int]):
        self.paths, self.offsets, self.loader_offsets = paths, offsets, loader_offsets
        self.names = names  # run-wide code -> name
        self.slot_codes = slot_codes
        self.moments = moments
        self.first = first  # code -> first row index in file order (the events DataFrame's order)
        self.by_epoch: dict[int, np.ndarray] = {}  # per-epoch op totals (set by scan_run)
        self.batch_parts = None  # the folded batch-level events (BatchParts), then the batches DataFrame
        self.folded_extent: dict[int, list[int]] = {}  # epoch -> time extent of the folded events

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __eq__(self, other):  # attrs comparisons (pandas concat) must not fail
        return self is other

    __hash__ = object.__hash__

    def epoch_totals(self) -> dict[int, dict[str, float]]:
        """``{epoch: {op: total ns}}`` over every op event (failed/exhausted fetches included)."""
        return {e: {self.names[c]: float(row[k]) for k, c in enumerate(self.slot_codes) if k < len(row) and row[k]}
                for e, row in sorted(self.by_epoch.items())}

    def op_order(self) -> list[str]:
        """Ops present, in pipeline order: load, transform ops by first occurrence, transform, sample, collate."""
        present = {self.names[c]: self.first[c] for c, k in zip(self.slot_codes, range(len(self.slot_codes)),
                                                              strict=True) if self.moments.n[k] > 0}
        ops = sorted((i, n) for n, i in present.items() if n not in OP_BUILTINS)
        return ([n for n in ("load",) if n in present] + [n for _, n in ops]
                + [n for n in ("transform", "sample", "collate") if n in present])

    def op_mean_ci95_ms(self, names, exclude_keys=None) -> dict[str, list[float] | None]:
        """95% interval (ms) of each op's mean per call, batches as the sampled units (a second scan)."""
        from lotus.trace.rescan import op_mean_ci95

        ci = op_mean_ci95(self, exclude_keys)
        slot = {self.names[c]: k for k, c in enumerate(self.slot_codes)}
        return {n: None if ci.get(slot.get(n)) is None else [v / 1e6 for v in ci[slot[n]]] for n in names}

    def op_table(self, exclude_keys=None) -> dict[str, dict]:
        """``{op: {count, sum_ns, mean_ns, std_ns, min_ns, max_ns, p25_ns, median_ns, p75_ns, p90_ns,
        p99_ns}}`` in pipeline order, without the events of the batch keys in ``exclude_keys`` (a frame
        with the columns rank, loader, epoch, batch_id); a second scan when there are some."""
        m = self.moments
        if exclude_keys is not None and len(exclude_keys):
            from lotus.trace.rescan import rescan_ops

            m = rescan_ops(self, exclude_keys)
        slot = {self.names[c]: k for k, c in enumerate(self.slot_codes)}
        out = {}
        for name in self.op_order():
            k = slot[name]
            n = int(m.n[k]) if k < len(m.n) else 0
            if n == 0:
                out[name] = {"count": 0}
                continue
            lo, hi = float(m.lo[k]), float(m.hi[k])
            p25, med, p75, p90, p99 = hist_quantiles(m.hist[k], (0.25, 0.5, 0.75, 0.9, 0.99), lo, hi)
            out[name] = {"count": n, "sum_ns": float(m.total[k]), "mean_ns": float(m.mean[k]),
                         "std_ns": math.sqrt(max(float(m.m2[k]) / n, 0.0)), "min_ns": lo, "max_ns": hi,
                         "p25_ns": p25, "median_ns": med, "p75_ns": p75, "p90_ns": p90, "p99_ns": p99}
        return out


@dataclass
class _FileScan:
    """State while scanning one file (name table and identity of its process)."""

    lut: np.ndarray
    consts: dict
    shift: int
    loader_offset: int


def _chunks(path: Path, offsets: dict, loader_offset: int, code_of, on_define=None):
    """Yield ``(arr, code, fs)`` per chunk of event records of ``path`` (control records applied).

    ``code_of(name, cat)`` registers a dynamic name and returns its run-wide code."""
    header, offset = read_header(path)
    shift = offsets.get(header.get("boot_id", ""), int(header["anchor_wall_ns"]) - int(header["anchor_mono_ns"]))
    lut = np.full(S.MAX_NAME_ID + 1, -1, np.int32)
    for e in S.BUILTIN_EVENTS:
        lut[e.id] = e.id
    role = header.get("role", "main")
    fs = _FileScan(lut, {"pid": int(header.get("pid", -1)), "role": _ROLES.index(role) if role in _ROLES else 0,
                         "worker_id": int(header.get("worker_id", -1)), "rank": int(header.get("rank", 0)),
                         "header": header, "clean": False, "defines": {}}, shift, loader_offset)
    defines = fs.consts["defines"]
    derive = int(header.get("version", 1)) >= S.DERIVED_FROM_SAMPLE
    for arr in iter_records(path, offset, CHUNK_RECORDS):
        ids = np.ascontiguousarray(arr["name_id"])  # one strided pass; the tests below are then cheap
        ctrl_mask = ids < 0
        if ctrl_mask.any():
            ctrl = arr[ctrl_mask]
            raw = ctrl.view(np.uint8).reshape(len(ctrl), S.RECORD_SIZE)
            touched = set()
            for i, rec in enumerate(ctrl):
                if rec["name_id"] == S.CTRL_DEFINE:
                    key = (int(rec["loader"]), int(rec["epoch"]))
                    defines.setdefault(key, []).append(raw[i, 8:].tobytes())
                    if key[0] == S.NS_EVENT_NAME and 0 <= key[1] <= S.MAX_NAME_ID:
                        touched.add(key)
                elif rec["name_id"] == S.CTRL_END:
                    fs.consts["clean"] = True
            for key in touched:
                name = b"".join(defines[key]).rstrip(b"\0").decode(errors="replace")
                if name in S.EVENTS_BY_NAME:
                    name += " (op)"
                lut[key[1]] = code_of(name, S.OP_CAT)
            arr = arr[~ctrl_mask]
            ids = arr["name_id"]
        if derive:  # version >= 2: load/transform spans are derived from sample and op records
            arr = derive_sample_spans(arr)
            ids = arr["name_id"]
        code = lut[ids]
        if (code < 0).any():
            for bad in np.unique(ids[code < 0]):
                nm = S.EVENTS_BY_ID.get(int(bad))
                lut[bad] = code_of(f"unknown:{bad}", "unknown")
                _log.warning("%s: event id %d is not defined in this file%s; kept as 'unknown:%d'",
                             path, bad, "" if nm is None else f" ({nm.name})", bad)
            code = lut[ids]
        yield arr, code, fs


def _legacy_fetch(arr, code):
    """lotus <= 0.1 wrote exhaustion as a flagged fetch: an ``exhausted`` event now (as load_events)."""
    arg = arr["arg"]
    legacy = (code == S.EV_FETCH) & (arg > 0) & ((arg & S.FETCH_STOP) != 0)
    if legacy.any():
        code = code.copy()
        code[legacy] = S.EV_EXHAUSTED
        arg = np.where(legacy, arg & ~S.FETCH_STOP, arg)
    return code, arg, int(legacy.sum())


def scan_run(run: Run):
    """The events DataFrame of ``run`` without per-sample detail, with an :class:`OpEngine` in its
    ``attrs["op_engine"]`` (see the module doc). The batch-level events are folded into the engine's
    ``batch_parts`` (:mod:`lotus.trace.batchparts`) rather than kept as rows, unless their batch ids are
    too sparse for it: the run is then scanned again, keeping them as rows."""
    if run.original:
        raise InputError("original LotusTrace logs are read in memory (lotus.trace.load_events)", run.path)
    try:
        return _scan(run, fold=True)
    except SparseBatchIds as exc:
        _log.info("%s: %s: batch ids too sparse to fold; scanning again with every batch-level event kept",
                  run.path, exc)
        release_freed_memory()
        return _scan(run, fold=False)


def _scan(run: Run, fold: bool):
    from lotus.trace.events import _Acc, _warn_missing_ranks, clock_offsets, loader_offsets

    acc = _Acc()
    good = []
    for p in run.native:
        try:
            read_header(p)
            good.append(p)
        except InputError as exc:
            _log.warning("%s; file skipped", exc)
    offsets = clock_offsets(good)
    per_process = loader_offsets(good)
    small = np.zeros(S.MAX_NAME_ID + 1 + 1024, bool)  # by run-wide code: kept as an event row
    slot_of = np.full(small.size, -1, np.int32)
    slot_codes: list[int] = []

    def code_of(name, cat):
        return acc.code(name, cat)

    def refresh():
        while len(acc.names) > small.size:
            raise InputError("more than 33,000 distinct event names", run.path)
        for c, (nm, cat) in enumerate(zip(acc.names, acc.cats, strict=True)):
            is_op = cat == S.OP_CAT or nm in OP_BUILTINS
            small[c] = not (cat == S.OP_CAT or c in PER_SAMPLE_IDS)
            if is_op and slot_of[c] < 0:
                slot_of[c] = len(slot_codes)
                slot_codes.append(c)

    moments = _Moments()
    parts = BatchParts(str(run.path)) if fold else None
    if fold:
        fold_kind, drop_kind = parts.codes(small.size)
    by_epoch: dict[int, np.ndarray] = {}
    first: dict[int, int] = {}
    row = 0
    for p in good:
        n_events = n_legacy = 0
        fs = None
        for arr, code, fs in _chunks(p, offsets, per_process.get(p, 0), code_of):
            if len(acc.names) != getattr(refresh, "n", -1):
                refresh()
                refresh.n = len(acc.names)
            present = np.flatnonzero(np.bincount(code, minlength=1))
            for c in present.tolist():
                if c not in first:
                    first[c] = row + int(np.argmax(code == c))
            idx = np.flatnonzero(small[code])  # kept rows: few; gather each field once
            if len(idx):
                kc = code[idx]
                karg = arr["arg"][idx]
                legacy = (kc == S.EV_FETCH) & (karg > 0) & ((karg & S.FETCH_STOP) != 0)
                if legacy.any():  # lotus <= 0.1: exhaustion was a flagged fetch (as load_events reads it)
                    kc[legacy] = S.EV_EXHAUSTED
                    karg = np.where(legacy, karg & ~S.FETCH_STOP, karg)
                    n_legacy += int(legacy.sum())
                lo = arr["loader"][idx].astype(np.int32) + fs.loader_offset
                start, dur, bid, ep = arr["start_ns"][idx] + fs.shift, arr["dur_ns"][idx], arr["batch_id"][idx], \
                    arr["epoch"][idx]
                folded = fold_kind[kc] & (bid >= 0) if fold else None
                if fold and folded.any():  # into the per-batch parts; most of them are then no event row
                    f = np.flatnonzero(folded)
                    parts.add(fs.consts["rank"], kc[f], bid[f], lo[f], ep[f],
                              {"worker_id": fs.consts["worker_id"], "pid": fs.consts["pid"], "start_ns": start[f],
                               "dur_ns": dur[f], "arg": karg[f]})
                    gone = folded & drop_kind[kc]
                    if gone.any():
                        parts.dropped(ep[gone], start[gone], dur[gone])
                        k = np.flatnonzero(~gone)
                        idx, kc, karg, lo, start, dur, bid, ep = (x[k] for x in (idx, kc, karg, lo, start, dur,
                                                                                  bid, ep))
                acc.add(len(idx), code=kc, start_ns=start, dur_ns=dur, batch_id=bid, sample=arr["sample"][idx],
                        arg=karg, loader=lo, epoch=ep,
                        **{c: fs.consts[c] for c in ("pid", "role", "worker_id", "rank")})
            slot = slot_of[code]
            ops = np.flatnonzero(slot >= 0)
            if len(ops):
                sl, dur, ep = slot[ops], arr["dur_ns"][ops], arr["epoch"][ops]
                sums = moments.add(sl, dur, len(slot_codes))
                _epoch_sums(by_epoch, ep, sl, dur, len(slot_codes), sums)
            n_events += len(arr)
            row += len(arr)
        if fs is None:  # a file with no record at all
            header, _ = read_header(p)
            fs = _FileScan(None, {"header": header, "clean": False, "defines": {},
                                  "pid": int(header.get("pid", -1)), "rank": int(header.get("rank", 0)),
                                  "worker_id": int(header.get("worker_id", -1))}, 0, per_process.get(p, 0))
        acc.files.append(_file_entry(p, fs, n_events))
        if n_legacy:
            _log.info("%s: %d 'fetch' events flagged FETCH_STOP (written by lotus <= 0.1) read as 'exhausted'",
                      p, n_legacy)
        if not fs.consts["clean"]:
            _log.info("%s: no end record (process killed or still running); %d events read", p, n_events)
    if not acc.files:
        raise InputError("no readable trace file", run.path)
    if not any(f["role"] == "main" for f in acc.files):
        _log.warning("%s: no main-process file: waits and consumption unknown (worker files only)", run.path)
    _warn_missing_ranks(acc.files, run.path)
    mark_continued(acc.files, stitch(good))
    refresh()
    df = _frame(acc, run)
    release_freed_memory()  # the chunks' temporaries: glibc keeps them otherwise
    df.attrs["op_engine"] = OpEngine(good, offsets, per_process, list(acc.names), slot_codes, moments, first)
    df.attrs["op_engine"].by_epoch = by_epoch
    df.attrs["op_engine"].batch_parts = parts
    df.attrs["op_engine"].folded_extent = parts.extent if fold else {}
    df.attrs["engine"] = "scan"
    return df


def _file_entry(p: Path, fs: _FileScan, n_events: int) -> dict:
    h = fs.consts["header"]
    loaders = {}
    for (ns, key), chunks in fs.consts["defines"].items():
        if ns == S.NS_LOADER:
            try:
                loaders[key + fs.loader_offset] = json.loads(b"".join(chunks).rstrip(b"\0").decode())
            except ValueError:
                _log.warning("%s: unreadable description of loader %d", p, key)
    return {"path": str(p), "format": "lotus", "role": h.get("role", "main"), "pid": h.get("pid"),
            "rank": h.get("rank", 0), "worker_id": h.get("worker_id", -1), "events": n_events,
            "clean_close": fs.consts["clean"], "loaders": loaders, "world_size": h.get("world_size", 1),
            "hostname": h.get("hostname"), "torch_version": h.get("torch_version")}


def _frame(acc, run: Run):
    """The events DataFrame of the kept rows (the columns and categories of ``load_events``)."""
    import pandas as pd

    from lotus.trace.events import EVENT_COLUMNS, _unique_labels

    code = acc.column("code")
    cat_names = sorted(set(acc.cats))
    cat_of_code = np.array([cat_names.index(c) for c in acc.cats], np.int8)
    columns = {"name": pd.Categorical.from_codes(code, categories=_unique_labels(acc.names)),
               "cat": pd.Categorical.from_codes(cat_of_code[code], categories=cat_names)}
    for c in EVENT_COLUMNS[2:]:
        arr = acc.column(c)
        columns[c] = pd.Categorical.from_codes(arr, categories=_ROLES) if c == "role" else arr
    df = pd.DataFrame(columns, copy=False)
    df.attrs["run"] = run.name
    df.attrs["path"] = str(run.path)
    df.attrs["files"] = acc.files
    return df
