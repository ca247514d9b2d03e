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
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.trace import schema as S
from lotus.trace.discover import Run, find_run
from lotus.trace.native import RECORD_DTYPE, read_header
from lotus.trace.original import read_original_log

_log = logging.getLogger("lotus.trace")
_CHUNK_RECORDS = 1 << 20

EVENT_COLUMNS = ["name", "cat", "start_ns", "dur_ns", "pid", "role", "worker_id", "rank", "loader",
                 "epoch", "batch_id", "sample", "arg"]
_ROLES = ["main", "worker"]


@dataclass
class _Acc:
    """Column arrays accumulated over files, plus the run's name table."""

    names: list[str] = field(default_factory=lambda: [e.name for e in S.BUILTIN_EVENTS])
    cats: list[str] = field(default_factory=lambda: [e.cat for e in S.BUILTIN_EVENTS])
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
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


def _native_file(acc: _Acc, path: Path, offsets: dict[str, int]) -> None:
    header, offset = read_header(path)
    size = path.stat().st_size
    n = (size - offset) // S.RECORD_SIZE
    if (size - offset) % S.RECORD_SIZE:
        _log.warning("%s: record %d truncated (a crashed process?); dropped", path, n)
    shift = offsets.get(header.get("boot_id", ""), int(header["anchor_wall_ns"]) - int(header["anchor_mono_ns"]))
    # Local name id -> run-wide code. Built-ins map to themselves.
    lut = np.full(S.MAX_NAME_ID + 1, -1, np.int32)
    for e in S.BUILTIN_EVENTS:
        lut[e.id] = e.id
    defines: dict[tuple[int, int], list[bytes]] = {}
    clean = False
    n_events = 0
    cols = {c: [] for c in ("code", "start_ns", "dur_ns", "loader", "epoch", "batch_id", "sample", "arg")}
    with open(path, "rb") as f:
        f.seek(offset)
        remaining = n
        while remaining > 0:
            count = min(remaining, _CHUNK_RECORDS)
            arr = np.fromfile(f, dtype=RECORD_DTYPE, count=count)
            remaining -= count
            if len(arr) == 0:
                break
            ids = arr["name_id"]
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
                        clean = True
                for key in touched:
                    name = b"".join(defines[key]).rstrip(b"\0").decode(errors="replace")
                    if name in S.EVENTS_BY_NAME:
                        name += " (op)"  # a user op named like a built-in event
                    lut[key[1]] = acc.code(name, S.OP_CAT)
                arr = arr[~ctrl_mask]
                ids = arr["name_id"]
            code = lut[ids]
            if (code < 0).any():
                for bad in np.unique(ids[code < 0]):
                    nm = S.EVENTS_BY_ID.get(int(bad))
                    lut[bad] = acc.code(f"unknown:{bad}", "unknown")
                    _log.warning("%s: event id %d is not defined in this file%s; kept as 'unknown:%d'",
                                 path, bad, "" if nm is None else f" ({nm.name})", bad)
                code = lut[ids]
            cols["code"].append(code)
            cols["start_ns"].append(arr["start_ns"] + shift)
            for c in ("dur_ns", "batch_id", "sample", "arg"):
                cols[c].append(np.ascontiguousarray(arr[c]))
            cols["loader"].append(arr["loader"].astype(np.int32))
            cols["epoch"].append(np.ascontiguousarray(arr["epoch"]))
            n_events += len(arr)
    part = {c: (np.concatenate(v) if len(v) != 1 else v[0]) if v else np.empty(0, np.int64) for c, v in cols.items()}
    role = header.get("role", "main")
    part["pid"] = np.full(n_events, int(header.get("pid", -1)), np.int32)
    part["role"] = np.full(n_events, _ROLES.index(role) if role in _ROLES else 0, np.int8)
    part["worker_id"] = np.full(n_events, int(header.get("worker_id", -1)), np.int32)
    part["rank"] = np.full(n_events, int(header.get("rank", 0)), np.int32)
    acc.parts.append(part)
    loaders = {}
    for (ns, key), chunks in defines.items():
        if ns == S.NS_LOADER:
            import json

            try:
                loaders[key] = json.loads(b"".join(chunks).rstrip(b"\0").decode())
            except ValueError:
                _log.warning("%s: unreadable description of loader %d", path, key)
    acc.files.append({"path": str(path), "format": "lotus", "role": role, "pid": header.get("pid"),
                      "rank": header.get("rank", 0), "worker_id": header.get("worker_id", -1),
                      "events": n_events, "clean_close": clean, "loaders": loaders,
                      "hostname": header.get("hostname"), "torch_version": header.get("torch_version")})
    if not clean:
        _log.info("%s: no end record (process killed or still running); %d events read", path, n_events)


def _original_file(acc: _Acc, path: Path, worker_ids: dict[int, int]) -> None:
    log = read_original_log(path)
    n = len(log.code)
    lut = np.array([acc.code(nm, c) for nm, c in zip(log.names, log.cats, strict=True)] or [0], np.int32)
    wait_code = log.names.index("wait") if "wait" in log.names else -1
    dur = log.dur_ns.copy()
    arg = np.full(n, -1, np.int64)
    consumed_code = log.names.index("consumed") if "consumed" in log.names else -1
    if consumed_code >= 0:
        dur[log.code == consumed_code] = 0  # the original duration is a placeholder
    if wait_code >= 0:
        is_wait = log.code == wait_code
        arg[is_wait] = np.where(log.dur_ns[is_wait] == 1000, S.WAIT_BUFFERED, 0)
    part = {
        "code": lut[log.code] if n else np.empty(0, np.int32),
        "start_ns": log.start_ns, "dur_ns": dur,
        "loader": np.zeros(n, np.int32), "epoch": np.zeros(n, np.int32),
        "batch_id": log.batch_id, "sample": np.full(n, -1, np.int64), "arg": arg,
        "pid": np.full(n, log.pid, np.int32),
        "role": np.full(n, _ROLES.index(log.role), np.int8),
        "worker_id": np.full(n, worker_ids.get(log.pid, -1), np.int32),
        "rank": np.zeros(n, np.int32),
    }
    acc.parts.append(part)
    acc.files.append({"path": str(path), "format": "lotustrace-2023", "role": log.role, "pid": log.pid,
                      "rank": 0, "worker_id": worker_ids.get(log.pid, -1), "events": n, "clean_close": None})


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

    acc = _Acc()
    good_native = []
    for p in run.native:
        try:
            read_header(p)
            good_native.append(p)
        except InputError as exc:
            _log.warning("%s; file skipped", exc)
    offsets = clock_offsets(good_native)
    for p in good_native:
        _native_file(acc, p, offsets)
    if run.original:
        pids = sorted(int(p.name.rsplit("_", 1)[1]) for p in run.original if "_worker_pid_" in p.name)
        worker_ids = {pid: i for i, pid in enumerate(pids)}
        for p in run.original:
            _original_file(acc, p, worker_ids)
    if not acc.parts:
        raise InputError("no readable trace file", run.path)
    if not any(f["role"] == "main" for f in acc.files):
        _log.warning("%s: no main-process file: waits and consumption unknown (worker files only)", run.path)
    if not any(f["role"] == "worker" for f in acc.files) and not any(
        len(p["code"]) and (p["code"] == S.EV_FETCH).any() for p in acc.parts
    ):
        _log.warning("%s: no worker file and no in-process preprocessing: preprocessing unknown", run.path)

    def cat(col: str) -> np.ndarray:
        arrays = [p[col] for p in acc.parts]
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]

    code = cat("code")
    cat_names = sorted(set(acc.cats))
    cat_of_code = np.array([cat_names.index(c) for c in acc.cats], np.int8)
    df = pd.DataFrame(
        {
            "name": pd.Categorical.from_codes(code, categories=_unique_labels(acc.names)),
            "cat": pd.Categorical.from_codes(cat_of_code[code], categories=cat_names),
            "start_ns": cat("start_ns"),
            "dur_ns": cat("dur_ns"),
            "pid": cat("pid"),
            "role": pd.Categorical.from_codes(cat("role"), categories=_ROLES),
            "worker_id": cat("worker_id"),
            "rank": cat("rank"),
            "loader": cat("loader"),
            "epoch": cat("epoch"),
            "batch_id": cat("batch_id"),
            "sample": cat("sample"),
            "arg": cat("arg"),
        },
        copy=False,
    )
    df.attrs["run"] = run.name
    df.attrs["path"] = str(run.path)
    df.attrs["files"] = acc.files
    if sort:
        df = df.sort_values("start_ns", kind="stable", ignore_index=True)
    return df


def _unique_labels(names: list[str]) -> list[str]:
    # The same name may exist under two categories (an op called like an unknown event): keep labels unique.
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}#{seen[n]}")
        else:
            seen[n] = 1
            out.append(n)
    return out


def load_events(path: str | os.PathLike, *, sort: bool = False):
    """All events of the run at ``path`` (a run directory, or one trace file).

    Reads lotus traces (``*.lotustrace``) and original LotusTrace logs alike. ``sort=True`` orders
    rows by ``start_ns``; otherwise rows are grouped by file in file order.
    """
    return events_of_run(find_run(path), sort=sort)
