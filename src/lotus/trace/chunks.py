"""A lotus trace file read in chunks of event records, control records applied: the one reader of
:func:`lotus.trace.load_events` and of the query engine's scan (:mod:`lotus.query.scan`).

Each chunk comes with the run-wide code of every record (names defined by the file registered through
``code_of``), rotated parts continued (:mod:`lotus.trace.parts`), packed records expanded
(:mod:`lotus.trace.packed`) and derived spans added (format >= 2).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lotus.trace import schema as S
from lotus.trace.native import read_header
from lotus.trace.packed import expand_main_batches
from lotus.trace.parts import iter_records, spans_for

_log = logging.getLogger("lotus.trace")
CHUNK_RECORDS = 1 << 20  # 48 MiB of records (op moments and derived spans are per chunk)
ROLES = ["main", "worker"]




@dataclass
class FileChunks:
    """State while scanning one file (name table and identity of its process)."""

    lut: np.ndarray
    consts: dict
    shift: int
    loader_offset: int


def record_chunks(path: Path, offsets: dict, loader_offset: int, code_of, on_define=None, spans: dict | None = None,
                  chunk_records: int | None = None):
    """Yield ``(arr, code, fs)`` per chunk of event records of ``path`` (control records applied).

    ``code_of(name, cat)`` registers a dynamic name and returns its run-wide code; ``spans``: the
    reader's derivers by process, continued across parts (:func:`lotus.trace.parts.spans_for`);
    ``chunk_records``: records a chunk (default :data:`CHUNK_RECORDS`). ``fs`` is the same object for every
    chunk of a file; after the last one, ``fs.consts`` holds its ``defines`` and ``clean`` (an end record)."""
    header, offset = read_header(path)
    shift = offsets.get(header.get("boot_id", ""), int(header["anchor_wall_ns"]) - int(header["anchor_mono_ns"]))
    lut = np.full(S.MAX_NAME_ID + 1, -1, np.int32)
    for e in S.BUILTIN_EVENTS:
        lut[e.id] = e.id
    role = header.get("role", "main")
    fs = FileChunks(lut, {"pid": int(header.get("pid", -1)), "role": ROLES.index(role) if role in ROLES else 0,
                         "worker_id": int(header.get("worker_id", -1)), "rank": int(header.get("rank", 0)),
                         "header": header, "clean": False, "defines": {}}, shift, loader_offset)
    defines = fs.consts["defines"]
    derive = spans_for(spans, path) if int(header.get("version", 1)) >= S.DERIVED_FROM_SAMPLE else None
    packed = int(header.get("version", 1)) >= S.PACKED_MAIN_BATCH
    for arr in iter_records(path, offset, chunk_records or CHUNK_RECORDS):
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


def legacy_fetch(arr, code):
    """lotus <= 0.1 wrote exhaustion as a flagged fetch: an ``exhausted`` event now (as load_events)."""
    arg = arr["arg"]
    legacy = (code == S.EV_FETCH) & (arg > 0) & ((arg & S.FETCH_STOP) != 0)
    if legacy.any():
        code = code.copy()
        code[legacy] = S.EV_EXHAUSTED
        arg = np.where(legacy, arg & ~S.FETCH_STOP, arg)
    return code, arg, int(legacy.sum())
