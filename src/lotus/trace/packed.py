"""Packed records of format version >= 3, expanded at read time (docs/trace-format.md "Packed records").

With num_workers=0 the main process writes each batch as two adjacent records (``EV_MAIN_BATCH``,
``EV_MAIN_LOOP``: 16 fields in one append, where version 2 wrote six records of 8 fields): the tracer's
fixed cost per batch is mostly packing fields. Every reader expands them here, before anything else looks
at the events, into exactly the records version 2 wrote; no analysis sees a packed record.
"""

from __future__ import annotations

import logging

import numpy as np

from lotus.trace import schema as S

_log = logging.getLogger("lotus.trace")


def expand_main_batches(arr: np.ndarray, where: object = "trace") -> np.ndarray:
    """Records of a version >= 3 file (events only, file order) with each packed num_workers=0 batch
    (an ``EV_MAIN_BATCH`` record and the ``EV_MAIN_LOOP`` record after it) replaced by the events that
    version 2 wrote in their place: ``dispatch``, ``collate`` (when it ran), ``fetch``, the previous batch's
    ``step`` (when there was one), ``wait``, ``consumed``. A batch record whose loop record is missing (the
    file ends there) still gives its dispatch, collation and fetch (items and flags unknown); a loop
    record without its batch record (never written so) is dropped with a warning. Pure; a new array."""
    ids = arr["name_id"]
    a = np.flatnonzero(ids == S.EV_MAIN_BATCH)
    b = np.flatnonzero(ids == S.EV_MAIN_LOOP)
    if a.size == 0 and b.size == 0:
        return arr
    nxt = a + 1
    paired = nxt < len(arr)
    paired[paired] = ids[nxt[paired]] == S.EV_MAIN_LOOP
    pb = nxt[paired]  # loop records that follow their batch record
    if pb.size != b.size:
        _log.warning("%s: %d packed loop record(s) without their batch record; dropped", where, b.size - pb.size)
        keep = np.ones(len(arr), bool)
        keep[b] = False
        keep[pb] = True
        arr = arr[keep]
        return expand_main_batches(arr, where)
    start, dur, disp, coll = (arr[f][a] for f in ("start_ns", "dur_ns", "sample", "arg"))
    has_coll = coll >= 0
    loop_arg = np.zeros(a.size, np.int64)
    loop_arg[paired] = arr["arg"][pb]
    flags = np.where(paired, loop_arg & 0xFFFFFFFF, 0)
    items = np.where(paired, (loop_arg >> S.MAIN_ITEMS_SHIFT) - 1, -1)
    prev_t = arr["sample"][pb]
    has_step = prev_t != 0
    counts = np.ones(len(arr), np.int64)
    counts[a] = 2 + has_coll
    counts[pb] = 2 + has_step
    out = np.repeat(arr, counts)
    first = np.cumsum(counts) - counts  # where each input record's expansion begins
    end = start + dur
    fetch0 = start + disp
    _set(out, first[a], S.EV_DISPATCH, start, disp, S.NO_ID, -1)
    c = first[a][has_coll] + 1
    c0 = (start + coll)[has_coll]
    _set(out, c, S.EV_COLLATE, c0, end[has_coll] - c0, S.NO_ID, items[has_coll])
    _set(out, first[a] + 1 + has_coll, S.EV_FETCH, fetch0, end - fetch0, S.NO_ID, flags)
    w0 = arr["start_ns"][pb]
    s = first[pb][has_step]
    _set(out, s, S.EV_STEP, prev_t[has_step], (w0 - prev_t)[has_step], S.NO_ID, 0)
    out["batch_id"][s] = arr["batch_id"][pb][has_step]
    this_batch = arr["batch_id"][a[paired]]
    w = first[pb] + has_step
    _set(out, w, S.EV_WAIT, w0, arr["dur_ns"][pb], S.NO_ID, 0)
    out["batch_id"][w] = this_batch
    _set(out, w + 1, S.EV_CONSUMED, w0 + arr["dur_ns"][pb], 0, S.NO_ID, 0)
    out["batch_id"][w + 1] = this_batch
    return out


def _set(out: np.ndarray, pos, name_id: int, start, dur, sample, arg) -> None:
    out["name_id"][pos] = name_id
    out["start_ns"][pos] = start
    out["dur_ns"][pos] = dur
    out["sample"][pos] = sample
    out["arg"][pos] = arg
