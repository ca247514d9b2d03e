"""Reading lotus's own trace files (``*.lotustrace``) into numpy record arrays.

Salvages what a crash leaves behind: a truncated last record is dropped with a warning naming the
file and record; a file without an end record is reported as not cleanly closed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.trace import schema as S
from lotus.trace.packed import expand_main_batches

_log = logging.getLogger("lotus.trace")
RECORD_DTYPE = np.dtype(S.RECORD_DTYPE)


@dataclass
class TraceFile:
    """One process's trace: header, event records (control records removed) and definitions."""

    path: Path
    header: dict
    records: np.ndarray  # RECORD_DTYPE, events only (name_id >= 0)
    names: dict[int, str] = field(default_factory=dict)  # dynamic event names of this file
    loaders: dict[int, dict] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    clean_close: bool = False
    end_wall_ns: int | None = None
    truncated_bytes: int = 0

    @property
    def role(self) -> str:
        return self.header.get("role", "main")

    @property
    def clock_offset_ns(self) -> int:
        """wall-clock ns minus monotonic ns, from this file's anchor."""
        return int(self.header["anchor_wall_ns"]) - int(self.header["anchor_mono_ns"])


def is_native_trace(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_file() and p.name.endswith((S.FILE_SUFFIX, S.FILE_SUFFIX + ".zst"))


_HEADERS: list[dict] = []  # while header_cache() holds: path -> (header, offset)


@contextlib.contextmanager
def header_cache():
    """Within the block, a file's header is read once (one command asks a run's files for their headers several
    times: which run, clocks, loader offsets, the scan; thousands of files for a job of many ranks)."""
    _HEADERS.append({})
    try:
        yield
    finally:
        _HEADERS.pop()


def open_raw(path: str | Path):
    """A binary file object over the (decompressed) bytes of a trace file or part."""
    p = str(path)
    if p.endswith(S.ZST):
        import pyarrow as pa

        return pa.input_stream(p, compression="zstd")
    return open(p, "rb")


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """The JSON header and the byte offset of the first record."""
    p = Path(path)
    if not _HEADERS:
        return _read_header(p)
    cache = _HEADERS[-1]
    key = os.fspath(p)
    if key not in cache:
        cache[key] = _read_header(p)
    header, offset = cache[key]
    return dict(header), offset


def _read_header(p: Path) -> tuple[dict, int]:
    with open_raw(p) as f:
        pre = f.read(S.PREAMBLE.size)
        if len(pre) < S.PREAMBLE.size:
            raise InputError("empty or truncated trace file (no complete preamble)", p)
        magic, hlen, rsize = S.PREAMBLE.unpack(pre)
        if magic != S.MAGIC:
            raise InputError(f"not a lotus trace file (magic {magic!r}, expected {S.MAGIC!r})", p)
        if rsize != S.RECORD_SIZE:
            raise InputError(f"unsupported record size {rsize} (this lotus reads {S.RECORD_SIZE})", p)
        raw = f.read(hlen)
        if len(raw) < hlen:
            raise InputError("truncated trace header", p)
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"corrupt trace header: {exc}", p) from None
    if header.get("version", 0) > S.FORMAT_VERSION:
        _log.warning("%s: trace format version %s is newer than this lotus (%s); reading what it knows",
                     p, header.get("version"), S.FORMAT_VERSION)
    for key in ("anchor_wall_ns", "anchor_mono_ns"):
        if key not in header:
            raise InputError(f"trace header lacks {key!r}", p)
    return header, S.PREAMBLE.size + hlen


def _decode_defines(ctrl: np.ndarray) -> dict[tuple[int, int], str]:
    """Concatenate the payload chunks of CTRL_DEFINE records per (namespace, key)."""
    chunks: dict[tuple[int, int], list[bytes]] = {}
    if len(ctrl) == 0:
        return {}
    payload = ctrl.view(np.uint8).reshape(len(ctrl), S.RECORD_SIZE)[:, 8:]
    for i, rec in enumerate(ctrl):
        chunks.setdefault((int(rec["loader"]), int(rec["epoch"])), []).append(payload[i].tobytes())
    return {k: b"".join(v).rstrip(b"\0").decode(errors="replace") for k, v in chunks.items()}


def read_trace_file(path: str | os.PathLike) -> TraceFile:
    """Read one ``.lotustrace`` file. Raises :class:`InputError` for files that cannot be read at all."""
    p = Path(path)
    header, offset = read_header(p)
    size = p.stat().st_size
    body = size - offset
    truncated = body % S.RECORD_SIZE
    n = body // S.RECORD_SIZE
    if truncated:
        _log.warning("%s: record %d truncated (%d of %d bytes, a crashed process?); dropped",
                     p, n, truncated, S.RECORD_SIZE)
    arr = np.fromfile(p, dtype=RECORD_DTYPE, count=n, offset=offset) if n else np.empty(0, RECORD_DTYPE)
    ids = arr["name_id"]
    is_event = ids >= 0
    events = arr[is_event] if not is_event.all() else arr
    version = int(header.get("version", 1))
    if version >= S.PACKED_MAIN_BATCH:
        events = expand_main_batches(events, p)
    if version >= S.DERIVED_FROM_SAMPLE:
        events = derive_sample_spans(events)
    tf = TraceFile(path=p, header=header, records=events, truncated_bytes=truncated)
    if not is_event.all():
        ctrl = arr[~is_event]
        defines = _decode_defines(ctrl[ctrl["name_id"] == S.CTRL_DEFINE])
        for (ns, key), text in defines.items():
            if ns == S.NS_EVENT_NAME:
                tf.names[key] = text
            elif ns == S.NS_LOADER:
                try:
                    tf.loaders[key] = json.loads(text)
                except json.JSONDecodeError:
                    _log.warning("%s: unreadable description of loader %d", p, key)
            elif ns == S.NS_META:
                try:
                    tf.meta.update(json.loads(text))
                except json.JSONDecodeError:
                    _log.warning("%s: unreadable metadata record", p)
        ends = ctrl[ctrl["name_id"] == S.CTRL_END]
        if len(ends):
            tf.clean_close = True
            tf.end_wall_ns = int(ends[-1]["arg"])
    return tf


class SampleSpans:
    """:func:`derive_sample_spans` over consecutive chunks of one file's records: an item's op records may
    lie in the chunk before its ``sample`` record, so the op records after a chunk's last ``sample``
    record are kept and counted with the next chunk (they are not repeated in its output). At most
    :data:`CARRY_MAX` of them are kept (an item has a few ops; a file of ops without samples stays bounded)."""

    CARRY_MAX = 1 << 16

    def __init__(self) -> None:
        self.carry = None

    def __call__(self, arr: np.ndarray) -> np.ndarray:
        carry = self.carry
        sp = np.flatnonzero(arr["name_id"] == S.EV_SAMPLE)  # found once: derive_sample_spans takes them
        if carry is not None and len(carry):  # (carry has no sample record)
            out = derive_sample_spans(np.concatenate([carry, arr]), sp + len(carry))[len(carry):]
        else:
            out = derive_sample_spans(arr, sp)
        tail = arr[sp[-1] + 1:] if sp.size else arr
        tail = tail[tail["name_id"] >= S.FIRST_DYNAMIC_ID]
        if not sp.size and carry is not None and len(carry):
            tail = np.concatenate([carry, tail])
        self.carry = tail[-self.CARRY_MAX:].copy()
        return out


def derive_sample_spans(arr: np.ndarray, sp: np.ndarray | None = None) -> np.ndarray:
    """Records of a version >= 2 file (events only, file order) as earlier versions wrote them: each
    ``sample`` record preceded by its ``load`` (the item's start to its first transform: the sample's
    ``arg``; the whole item when ``arg`` is -1) and, when a transform ran, its ``transform`` (the first
    transform's start to the end of the item's last op record, which lies between the previous
    ``sample`` record and this one with the same batch and sample index). The sample's ``arg`` becomes 0.
    Pure; a new array. ``sp``: the positions of the ``sample`` records, if the caller has them."""
    ids = arr["name_id"]
    if sp is None:
        sp = np.flatnonzero(ids == S.EV_SAMPLE)
    if sp.size == 0:
        return arr
    start = arr["start_ns"][sp]
    load = arr["arg"][sp]
    has_tf = load >= 0
    tf_start = start + np.where(has_tf, load, 0)
    tf_end = tf_start.copy()
    ops = np.flatnonzero(ids >= S.FIRST_DYNAMIC_ID)
    if ops.size:
        tgt = np.searchsorted(sp, ops)  # the first sample record after each op record
        ok = tgt < sp.size
        ops, tgt = ops[ok], tgt[ok]
        same = (arr["batch_id"][ops] == arr["batch_id"][sp[tgt]]) & (arr["sample"][ops] == arr["sample"][sp[tgt]])
        ops, tgt = ops[same], tgt[same]
        np.maximum.at(tf_end, tgt, arr["start_ns"][ops] + arr["dur_ns"][ops])
    counts = np.ones(len(arr), np.int64)
    counts[sp] += 1 + has_tf
    out = np.repeat(arr, counts)
    s_pos = (np.cumsum(counts) - 1)[sp]
    load_pos = s_pos - 1 - has_tf
    out["name_id"][load_pos] = S.EV_LOAD
    out["dur_ns"][load_pos] = np.where(has_tf, load, arr["dur_ns"][sp])
    out["arg"][load_pos] = 0
    t_pos = s_pos[has_tf] - 1
    out["name_id"][t_pos] = S.EV_TRANSFORM
    out["start_ns"][t_pos] = tf_start[has_tf]
    out["dur_ns"][t_pos] = (tf_end - tf_start)[has_tf]
    out["arg"][t_pos] = 0
    out["arg"][s_pos] = 0
    return out
