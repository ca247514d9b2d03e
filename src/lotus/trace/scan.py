"""The out-of-core engine: a run read in fixed-size chunks, in memory bounded by its batches, not its events.

``scan_run(run)`` reads every ``.lotustrace`` file of a run in chunks of :data:`CHUNK_RECORDS` records
(numpy, at memory speed) and keeps:

* the batch-level events folded into compact per-batch columns (:mod:`lotus.trace.batchparts`, a
  :class:`~lotus.trace.batchtable.BatchTable` in the engine's ``batch_table``): the batches table, and
  so waits and verdicts, is the one :func:`lotus.trace.batches.batches_from_events` makes from the
  full events, exactly;
* the other events that are *not* per-sample detail (``sample``, ``load``, ``transform`` and the op
  events are left out; of the batch-level ones only ``exhausted``, failed ``fetch`` and GPU events) as
  an events DataFrame with the columns of :func:`lotus.trace.load_events` (outcomes, GPU telemetry,
  markers); the fetches' detail flags are counted (:func:`lotus.trace.batches.detail_share`);
* per op (``load``, every transform op, ``transform``, ``sample``, ``collate``): count, sum, variance
  (Chan's merge of per-chunk moments), exact min and max, and a log-histogram of durations
  (:data:`BINS_PER_OCTAVE` bins per power of two) for the quantiles.

Exact vs approximate (see docs/analysis.md, "Large traces"): counts, sums, means, min and max are
exact; std agrees with numpy's to ~1e-12; the quantiles (median, p25, p75, p90, p99) are read off the
histogram, within 0.04% of numpy's (linear interpolation between neighbouring ranks, each rank's value
being its bin's geometric centre, clipped to [min, max]). Durations <= 0 fall in one bin valued 0.

Excluding batches (failed or exhausted fetches, ``--remove-outliers``) needs a second scan, made only
when there is something to exclude (:meth:`OpEngine.op_table`).

The files are read in parts (runs of consecutive files, :func:`lotus.trace.scanfiles.scan_files`), in
this process or in parallel on every core or on a cluster (:mod:`lotus.trace.parallel`: ``$LOTUS_JOBS``,
``$LOTUS_CLUSTER``), and merged in file order into exactly what one pass keeps
(:mod:`lotus.trace.scanmerge`): the same outputs, byte for byte.

What the scan keeps beside the events is attached as ``events.attrs["op_engine"]`` (an
:class:`~lotus.trace.opengine.OpEngine`); :func:`lotus.analysis.stats.op_durations` and its users
read per-op statistics from it. ``n_samples`` of batches without a collate is counted by another scan
(:func:`lotus.trace.rescan.fill_sample_counts`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.trace import schema as S
from lotus.trace.batchparts import SparseBatchIds
from lotus.trace.discover import FileList, Run
from lotus.trace.moments import _Moments  # noqa: F401 - lotus.trace.rescan's
from lotus.trace.native import read_header
from lotus.trace.opengine import OpEngine
from lotus.trace.original import release_freed_memory
from lotus.trace.packed import expand_main_batches
from lotus.trace.parts import iter_records, mark_continued, spans_for, stitch

_log = logging.getLogger("lotus.trace")
CHUNK_RECORDS = 1 << 20  # 48 MiB of records (as load_events: op moments and derived spans are per chunk)
_ROLES = ["main", "worker"]


@dataclass
class _FileScan:
    """State while scanning one file (name table and identity of its process)."""

    lut: np.ndarray
    consts: dict
    shift: int
    loader_offset: int


def _chunks(path: Path, offsets: dict, loader_offset: int, code_of, on_define=None, spans: dict | None = None):
    """Yield ``(arr, code, fs)`` per chunk of event records of ``path`` (control records applied).

    ``code_of(name, cat)`` registers a dynamic name and returns its run-wide code; ``spans``: the
    reader's derivers by process, continued across parts (:func:`lotus.trace.parts.spans_for`)."""
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
    derive = spans_for(spans, path) if int(header.get("version", 1)) >= S.DERIVED_FROM_SAMPLE else None
    packed = int(header.get("version", 1)) >= S.PACKED_MAIN_BATCH
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
            pos = np.flatnonzero(ctrl_mask)
            head = int(np.searchsorted(pos - np.arange(len(pos)), 1))  # control records before any event
            tail = len(pos) - head
            at_ends = tail == 0 or pos[head] == len(arr) - tail  # as usual: a view, no copy of the chunk
            arr = arr[head: len(arr) - tail] if at_ends else arr[~ctrl_mask]
            ids = arr["name_id"]
        if packed:  # version >= 3: a num_workers=0 batch's records, packed in two
            arr = expand_main_batches(arr, path)
            ids = arr["name_id"]
        if derive is not None:  # version >= 2: load/transform spans are derived from sample and op records
            arr = derive(arr)
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


def scan_run(run: Run, columns=None, op_stats: bool = True, census: bool = False, op_reduce: str = ""):
    """The events DataFrame of ``run`` without per-sample detail, with an :class:`OpEngine` in its
    ``attrs["op_engine"]`` (see the module doc). The batch-level events are folded into the engine's
    ``batch_parts`` (:mod:`lotus.trace.batchparts`) rather than kept as rows, unless their batch ids are
    too sparse for it: the run is then scanned again, keeping them as rows. ``columns``: the per-batch
    columns to keep (:data:`lotus.trace.batchparts.SUMMARY_COLUMNS` for the summaries of ``lotus
    analyze stats|wait|verdict``; the table then makes no batches DataFrame); None: all. ``census``: also
    count every record (:class:`lotus.trace.census.Census`, the engine's ``census``; ``lotus info``).
    ``op_reduce``: ``"batches"`` also keeps per-batch op sums, ``"values"`` those and every op duration in
    temporary files (:mod:`lotus.trace.opreduce`, the engine's ``op_reduce``: ``lotus report`` and ``lotus
    plot`` then read the files once)."""
    if run.original:
        raise InputError("original LotusTrace logs are read in memory (lotus.trace.load_events)", run.path)
    try:
        return _scan(run, fold=True, columns=columns, op_stats=op_stats, census=census, op_reduce=op_reduce)
    except SparseBatchIds as exc:
        _log.info("%s: %s: batch ids too sparse to fold; scanning again with every batch-level event kept",
                  run.path, exc)
        release_freed_memory()
        return _scan(run, fold=False, op_stats=op_stats, census=census, op_reduce=op_reduce)


def _scan(run: Run, fold: bool, columns=None, op_stats: bool = True, census: bool = False, op_reduce: str = ""):
    from lotus.trace.events import _warn_missing_ranks, clock_offsets, loader_offsets
    from lotus.trace.parallel import scan_parts
    from lotus.trace.scanfiles import ScanContext
    from lotus.trace.scanmerge import merge_parts

    good = []
    for p in run.native:
        try:
            read_header(p)
            good.append(p)
        except InputError as exc:
            _log.warning("%s; file skipped", exc)
    offsets = clock_offsets(good)
    per_process = loader_offsets(good)
    ctx = ScanContext(str(run.path), offsets, per_process, fold, None if columns is None else frozenset(columns),
                      op_stats, census, op_reduce=op_reduce)
    part = merge_parts(scan_parts(good, ctx))
    acc, parts = part.acc, part.batch_parts
    if not acc.files:
        raise InputError("no readable trace file", run.path)
    if not any(f["role"] == "main" for f in acc.files):
        _log.warning("%s: no main-process file: waits and consumption unknown (worker files only)", run.path)
    _warn_missing_ranks(acc.files, run.path)
    mark_continued(acc.files, stitch(good))
    names = list(acc.names)
    release_freed_memory()  # the chunks' temporaries (glibc keeps them otherwise), before pandas is imported
    df = _frame(acc, run)
    engine = df.attrs["op_engine"] = OpEngine(good, offsets, per_process, names, part.slot_codes, part.moments,
                                              part.first)
    engine.by_epoch, engine.by_rank = part.by_epoch, part.by_rank
    engine.op_stats = op_stats
    engine.census = part.census
    engine.op_reduce = part.op_reduce  # None unless asked for (op_reduce)
    df.attrs["engine"] = "scan"
    if fold:
        engine.folded_extent, engine.fetch_counts = parts.extent, parts.fetches
        engine.batch_table = parts.finish(df.attrs)
        release_freed_memory()  # the dense per-group arrays
    return df


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
    df.attrs["files"] = FileList(acc.files)  # shared by the frames made from it
    return df
