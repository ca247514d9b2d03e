"""``load_events``: every event of a run as one pandas DataFrame.

Columns (see docs/trace-format.md, "The events DataFrame"):

========== ========= ===========================================================================
name       category  event name: a built-in (``fetch``, ``wait``...) or an op (``RandomResizedCrop``)
cat        category  main | pin | batch | sample | op | gpu | marker | unknown
start_ns   int64     start, wall-clock epoch ns (monotonic ns + the host's anchor offset)
dur_ns     int64     duration in ns (0 for instants)
pid        int32     process that recorded the event
role       category  main | worker
worker_id  int32     DataLoader worker id, -1 in the main process
rank       int32     distributed rank
loader     int32     DataLoader id within the rank's main process
epoch      int32     epoch (iteration over the loader) of the event
batch_id   int64     batch index within its epoch, -1 if none
sample     int64     dataset index of per-sample events, -1 if none/unknown
arg        int64     event-specific value (worker id of a dispatch, flags of a wait...)
========== ========= ===========================================================================

A worker fetch that found its IterableDataset exhausted is an ``exhausted`` event (cat ``marker``),
never a ``fetch``: files of lotus <= 0.1 wrote it as a ``fetch`` with arg bit ``FETCH_STOP``, and the
reader turns those into ``exhausted`` events (that bit cleared), so analyses see one representation.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.trace import schema as S
from lotus.trace.chunks import ROLES, legacy_fetch, record_chunks
from lotus.trace.discover import FileList, Run, find_run
from lotus.trace.native import read_header
from lotus.trace.original import PLACEHOLDER_WAIT_NS, read_original_log, release_freed_memory
from lotus.trace.parts import mark_continued, stitch

_log = logging.getLogger("lotus.trace")
_CHUNK_RECORDS = 1 << 20

EVENT_COLUMNS = ["name", "cat", "start_ns", "dur_ns", "pid", "role", "worker_id", "rank", "loader",
                 "epoch", "batch_id", "sample", "arg"]
_ROLES = ROLES


# dtype of every column the accumulator builds (codes first, then the DataFrame's integer columns)
_DTYPES = {"code": np.int32, "start_ns": np.int64, "dur_ns": np.int64, "pid": np.int32, "role": np.int8,
           "worker_id": np.int32, "rank": np.int32, "loader": np.int32, "epoch": np.int32,
           "batch_id": np.int64, "sample": np.int64, "arg": np.int64}


@dataclass
class Accumulator:
    """Column parts accumulated over files, plus the run's name table.

    Memory is bounded: a part is either an array or a scalar (a value constant over a file or chunk,
    such as its pid, rank or epoch); :meth:`column` concatenates one column at a time and drops its
    parts as it goes, and a column constant over the whole run becomes a read-only broadcast view
    (no memory per row). Peak memory is thus about the final DataFrame plus one column.
    """

    names: list[str] = field(default_factory=lambda: [e.name for e in S.BUILTIN_EVENTS])
    cats: list[str] = field(default_factory=lambda: [e.cat for e in S.BUILTIN_EVENTS])
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    parts: dict[str, list] = field(default_factory=lambda: {c: [] for c in _DTYPES})
    lengths: list[int] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.index = {(n, c): i for i, (n, c) in enumerate(zip(self.names, self.cats, strict=True))}

    def code(self, name: str, cat: str) -> int:
        key = (name, cat)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.names)
            self.names.append(name)
            self.cats.append(cat)
        return i

    @property
    def n(self) -> int:
        return sum(self.lengths)

    def add(self, n: int, **cols) -> None:
        """One part of ``n`` rows: every column as an array of length ``n`` or a scalar."""
        if n == 0:
            return
        self.lengths.append(n)
        for c, dtype in _DTYPES.items():
            v = cols[c]
            if isinstance(v, np.ndarray):
                if len(v) and v[0] == v[-1] and (v == v[0]).all():
                    v = v[0].item()  # constant over the part: keep one value
                else:  # a contiguous copy: never keep a whole record chunk alive through a field view
                    v = np.ascontiguousarray(v, dtype=dtype)
            self.parts[c].append(v)

    def has_code(self, code: int) -> bool:
        return any(np.any(p == code) for p in self.parts["code"])

    def column(self, name: str) -> np.ndarray:
        """The concatenated column; its parts are released."""
        parts, dtype, n = self.parts[name], _DTYPES[name], self.n
        self.parts[name] = []
        if not any(isinstance(p, np.ndarray) for p in parts) and len(set(parts)) <= 1:
            return np.broadcast_to(np.array(parts[0] if parts else 0, dtype), (n,))
        if len(parts) == 1:
            return parts[0]
        out = np.empty(n, dtype)
        pos = 0
        for i, length in enumerate(self.lengths):
            out[pos: pos + length] = parts[i]
            parts[i] = None
            pos += length
        release_freed_memory()
        return out


def loader_offsets(paths: list[Path]) -> dict[Path, int]:
    """Per file, what to add to its loader ids so that loaders of different processes of one rank never
    share an id (loader ids are counted per process: two independent processes, e.g. subprocesses of one
    job, both have a loader 0). The first owner of a rank keeps its ids; the k-th adds ``k * LOADER_STRIDE``.
    A worker file's owner is its header's ``main_pid`` (files without it belong to the rank's first owner)."""
    owners: dict[int, set[int]] = {}
    of_file: dict[Path, tuple[int, int | None]] = {}
    for p in paths:
        try:
            h, _ = read_header(p)
        except InputError:
            continue
        rank = int(h.get("rank", 0))
        if h.get("role") == "main":
            owner = int(h.get("pid", -1))
            owners.setdefault(rank, set()).add(owner)
        else:
            owner = int(h["main_pid"]) if int(h.get("main_pid", -1)) != -1 else None
        of_file[p] = (rank, owner)
    out = {}
    for p, (rank, owner) in of_file.items():
        order = sorted(owners.get(rank, ()))
        out[p] = (order.index(owner) if owner in order else 0) * LOADER_STRIDE
    return out


LOADER_STRIDE = 1000  # loader ids of the k-th process of a rank: k * 1000 + its own id


def _native_file(acc: Accumulator, path: Path, offsets: dict[str, int], loader_offset: int = 0,
                 spans: dict | None = None) -> None:
    n_events = 0
    n_legacy = 0
    fs = None
    for arr, code, fs in record_chunks(path, offsets, loader_offset, acc.code, spans=spans,
                                       chunk_records=_CHUNK_RECORDS):
        code, arg, legacy = legacy_fetch(arr, code)  # lotus <= 0.1: exhaustion was a flagged fetch
        n_legacy += legacy
        acc.add(len(arr), code=code, start_ns=arr["start_ns"] + fs.shift, dur_ns=arr["dur_ns"],
                batch_id=arr["batch_id"], sample=arr["sample"], arg=arg,
                loader=arr["loader"] if not loader_offset else arr["loader"].astype(np.int32) + loader_offset,
                epoch=arr["epoch"], **{k: fs.consts[k] for k in ("pid", "role", "worker_id", "rank")})
        n_events += len(arr)
        del arr, code, arg
    if fs is None:  # a file of no record at all
        header, defines, clean = read_header(path)[0], {}, False
    else:
        header, defines, clean = fs.consts["header"], fs.consts["defines"], fs.consts["clean"]
    role = header.get("role", "main")
    loaders = loader_descriptions(defines, loader_offset, path)
    acc.files.append({"path": str(path), "format": "lotus", "role": role, "pid": header.get("pid"),
                      "rank": header.get("rank", 0), "worker_id": header.get("worker_id", -1),
                      "events": n_events, "clean_close": clean, "loaders": loaders,
                      "world_size": header.get("world_size", 1), "version": int(header.get("version", 1)),
                      "detail_budget_pct": header.get("detail_budget_pct"),
                      "hostname": header.get("hostname"), "torch_version": header.get("torch_version")})
    if n_legacy:
        _log.info("%s: %d 'fetch' events flagged FETCH_STOP (written by lotus <= 0.1) read as 'exhausted'",
                  path, n_legacy)
    if not clean:
        _log.info("%s: no end record (process killed or still running); %d events read", path, n_events)


def readable_native(run: Run) -> tuple[list[Path], dict[str, int], dict[Path, int]]:
    """The run's lotus trace files whose header reads (a warning for each other one), with their clock
    offsets (:func:`clock_offsets`) and loader offsets (:func:`loader_offsets`)."""
    good = []
    for p in run.native:
        try:
            read_header(p)
            good.append(p)
        except InputError as exc:
            _log.warning("%s; file skipped", exc)
    if run.whole is not None:  # a part of a larger run's files: its offsets
        return good, *run.whole
    return good, clock_offsets(good), loader_offsets(good)


def loader_descriptions(defines: dict, loader_offset: int, path) -> dict[int, dict]:
    """The DataLoader descriptions a file defines (``{loader id + offset: description}``); one warning each
    for those that cannot be read."""
    import json

    loaders = {}
    for (ns, key), chunks in defines.items():
        if ns == S.NS_LOADER:
            try:
                loaders[key + loader_offset] = json.loads(b"".join(chunks).rstrip(b"\0").decode())
            except ValueError:
                _log.warning("%s: unreadable description of loader %d", path, key)
    return loaders


def _original_file(acc: Accumulator, path: Path, worker_ids: dict[int, int]) -> None:
    log = read_original_log(path)
    n = len(log.code)
    lut = np.array([acc.code(nm, c) for nm, c in zip(log.names, log.cats, strict=True)] or [0], np.int32)
    dur = log.dur_ns
    arg: np.ndarray | int = -1
    if "consumed" in log.names:  # the original duration is a placeholder
        dur = np.where(log.code == log.names.index("consumed"), 0, dur)
    if "wait" in log.names:
        is_wait = log.code == log.names.index("wait")
        arg = np.full(n, -1, np.int64)
        arg[is_wait] = np.where(dur[is_wait] == PLACEHOLDER_WAIT_NS, S.WAIT_BUFFERED, 0)
    worker_id = worker_ids.get(log.pid, -1)
    acc.add(n, code=lut[log.code] if n else np.empty(0, np.int32), start_ns=log.start_ns, dur_ns=dur,
            batch_id=log.batch_id, sample=-1, arg=arg, loader=0, epoch=0, pid=log.pid,
            role=_ROLES.index(log.role), worker_id=worker_id, rank=0)
    acc.files.append({"path": str(path), "format": "lotustrace-2023", "role": log.role, "pid": log.pid,
                      "rank": 0, "worker_id": worker_id, "events": n, "clean_close": None})


def warn_main_and_ranks(files: list[dict], where) -> None:
    """A run (its files' headers) without a main-process file, or without some ranks' files: say so."""
    if not any(f["role"] == "main" for f in files):
        _log.warning("%s: no main-process file: waits and consumption unknown (worker files only)", where)
    warn_missing_ranks(files, where)


def warn_missing_ranks(files: list[dict], where) -> None:
    """A distributed run whose directory lacks some ranks' files: say which; the others are analysed."""
    world = max((int(f.get("world_size") or 1) for f in files), default=1)
    if world <= 1:
        return
    main_ranks = {int(f.get("rank", 0)) for f in files if f.get("role") == "main"}
    missing = sorted(set(range(world)) - main_ranks)
    if missing:
        _log.warning("%s: no trace files of rank(s) %s (world size %d); analysing ranks %s",
                     where, ", ".join(map(str, missing)), world, ", ".join(map(str, sorted(main_ranks))) or "none")


def clock_offsets(paths: list[Path]) -> dict[str, int]:
    """One wall-minus-monotonic offset per clock domain (boot id): the anchor of the main file of
    the lowest rank there, else of the first file. Keeps events of one host on one time base."""
    best: dict[str, tuple[tuple, int]] = {}
    for p in paths:
        try:
            h, _ = read_header(p)
        except InputError:
            continue
        key = (0 if h.get("role") == "main" else 1, int(h.get("rank", 0)), str(p))
        dom = h.get("boot_id", "")
        if dom not in best or key < best[dom][0]:
            best[dom] = (key, int(h["anchor_wall_ns"]) - int(h["anchor_mono_ns"]))
    return {dom: off for dom, (_, off) in best.items()}


def events_of_run(run: Run, *, sort: bool = False):
    """The events DataFrame of one :class:`~lotus.trace.discover.Run`."""
    import pandas as pd

    acc = Accumulator()
    good_native, offsets, per_process = readable_native(run)
    spans: dict = {}
    for p in good_native:
        _native_file(acc, p, offsets, per_process.get(p, 0), spans)
    mark_continued(acc.files, stitch(good_native))
    if run.original:
        pids = sorted(int(p.name.rsplit("_", 1)[1]) for p in run.original if "_worker_pid_" in p.name)
        worker_ids = {pid: i for i, pid in enumerate(pids)}
        for p in run.original:
            _original_file(acc, p, worker_ids)
    if not acc.files:
        raise InputError("no readable trace file", run.path)
    if not any(f["role"] == "main" for f in acc.files):
        _log.warning("%s: no main-process file: waits and consumption unknown (worker files only)", run.path)
    warn_missing_ranks(acc.files, run.path)
    if not any(f["role"] == "worker" for f in acc.files) and not acc.has_code(S.EV_FETCH):
        _log.warning("%s: no worker file and no in-process preprocessing: preprocessing unknown", run.path)

    # One column at a time, so that peak memory stays near the size of the result.
    order = None
    if sort:
        start = acc.column("start_ns")
        order = np.argsort(start, kind="stable")
        acc.parts["start_ns"] = [start]

    def cat(col: str) -> np.ndarray:
        arr = acc.column(col)
        if order is not None and arr.strides != (0,):
            arr = arr[order]
        return arr

    code = cat("code")
    cat_names = sorted(set(acc.cats))
    cat_of_code = np.array([cat_names.index(c) for c in acc.cats], np.int8)
    name = pd.Categorical.from_codes(code, categories=unique_labels(acc.names))
    category = pd.Categorical.from_codes(cat_of_code[code], categories=cat_names)
    del code
    columns = {"name": name, "cat": category}
    for c in EVENT_COLUMNS[2:]:
        columns[c] = pd.Categorical.from_codes(cat(c), categories=_ROLES) if c == "role" else cat(c)
    df = pd.DataFrame(columns, copy=False)
    df.attrs["run"] = run.name
    df.attrs["path"] = str(run.path)
    df.attrs["files"] = FileList(acc.files)  # shared by the frames made from it
    return df


def unique_labels(names: list[str]) -> list[str]:
    # The same name may exist under two categories (an op called like an unknown event): keep labels unique.
    from lotus._names import dedupe

    return dedupe(names, "#")


def load_events(path: str | os.PathLike, *, sort: bool = False):
    """All events of the run at ``path`` (a run directory, or one trace file).

    Reads lotus traces (``*.lotustrace``) and original LotusTrace logs alike. ``sort=True`` orders
    rows by ``start_ns``; otherwise rows are grouped by file in file order.
    """
    return events_of_run(find_run(path), sort=sort)
