"""Reading ORIGINAL LotusTrace logs (IISWC 2024 artifact) into the same columns as lotus traces.

Files are named ``<prefix>_worker_pid_<pid>`` and ``<prefix>_main_pid_<pid>``; each line is
``NAME,START_NS,DUR_NS`` without a header, times from ``time.time_ns()``. Names:

====================================  ==========================================================
``SBatchPreprocessed_<id>``           worker prepares batch ``id`` -> ``fetch``
``SCollation``                        collation of the batch whose marker follows -> ``collate``
``SLoader`` / ``STransform``          per-sample load / all transforms -> ``load`` / ``transform``
``S<Op>`` (e.g. ``SRandomResizedCrop``) per-sample op -> op ``<Op>``
``SBatchWait_<id>``                   main waits for batch ``id`` -> ``wait`` (newer logs)
``SBatchConsumed_<id>``               batch handed to the loop -> ``consumed`` (duration is a placeholder)
====================================  ==========================================================

Per-sample lines carry no batch id: they belong to the batch whose ``SBatchPreprocessed`` line
follows them in the file (the original writer logged a batch's marker after its samples).
In newer logs a ``SBatchWait`` of exactly 1000 ns is the converter's placeholder for a batch that
was already buffered (arrived out of order); lotus reports it as ``buffered``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lotus.errors import InputError

_log = logging.getLogger("lotus.trace")
ORIGINAL_NAME = re.compile(r"^(?P<prefix>.*)_(?P<role>worker|main)_pid_(?P<pid>\d+)$")
PLACEHOLDER_WAIT_NS = 1000

_FIXED = {"SLoader": ("load", "sample"), "STransform": ("transform", "sample"), "SCollation": ("collate", "batch")}
_BATCHED = {"SBatchPreprocessed": ("fetch", "batch"), "SBatchWait": ("wait", "main"),
            "SBatchConsumed": ("consumed", "main")}


@dataclass
class OriginalLog:
    path: Path
    role: str  # main | worker
    pid: int
    names: list[str]  # event name per category code
    cats: list[str]
    code: np.ndarray  # int32 index into names
    start_ns: np.ndarray  # int64
    dur_ns: np.ndarray  # int64
    batch_id: np.ndarray  # int64, -1 where unknown


def is_original_log(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_file() and ORIGINAL_NAME.match(p.name) is not None


def _parse_fast(source):
    import pyarrow as pa
    import pyarrow.csv as pacsv

    bad: list[str] = []

    def on_bad(row) -> str:
        bad.append(row.text)
        return "skip"

    table = pacsv.read_csv(
        source,
        # One thread: per-thread malloc arenas would keep the parse's transient memory after it ends
        # (2 cores parse a 200 MB log set in about a second either way).
        read_options=pacsv.ReadOptions(column_names=["name", "start", "dur"], block_size=4 << 20,
                                       use_threads=False),
        parse_options=pacsv.ParseOptions(invalid_row_handler=on_bad),
        convert_options=pacsv.ConvertOptions(
            column_types={"name": pa.dictionary(pa.int32(), pa.string()), "start": pa.int64(), "dur": pa.int64()},
            strings_can_be_null=False,
        ),
        # malloc, not arrow's caching pool: what the parse frees goes back for numpy to reuse
        memory_pool=pa.system_memory_pool(),
    )
    if bad:
        raise ValueError("malformed rows")
    names = table.column("name").combine_chunks()
    if names.null_count or table.column("start").null_count or table.column("dur").null_count:
        raise ValueError("missing values")
    categories = names.dictionary.to_pylist()
    codes = names.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    start = table.column("start").to_numpy()
    dur = table.column("dur").to_numpy()
    del table, names
    release_freed_memory()
    return categories, codes, start, dur


def release_freed_memory() -> None:
    """Hand memory freed by a large parse back to the OS (glibc keeps it otherwise); no-op elsewhere."""
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = False
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            pass
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def _int_field(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what} {text.strip()[:30]!r} is not an integer") from None


def _parse_slow(data: bytes, path: Path):
    """Line by line: every bad line is reported with its number and skipped; the rest is kept."""
    categories: dict[str, int] = {}
    codes, starts, durs = [], [], []
    n_bad = 0
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        parts = line.split(",")
        try:
            if len(parts) != 3:
                raise ValueError(f"expected NAME,START_NS,DUR_NS, got {len(parts)} fields")
            name = parts[0].strip()
            start, dur = _int_field(parts[1], "START_NS"), _int_field(parts[2], "DUR_NS")
            if not name:
                raise ValueError("empty event name")
        except ValueError as exc:
            n_bad += 1
            if n_bad <= 5:
                _log.warning("%s:%d: %s; line skipped", path, lineno, exc)
            continue
        codes.append(categories.setdefault(name, len(categories)))
        starts.append(start)
        durs.append(dur)
    if n_bad > 5:
        _log.warning("%s: %d malformed lines skipped in all", path, n_bad)
    return (list(categories), np.asarray(codes, np.int32), np.asarray(starts, np.int64),
            np.asarray(durs, np.int64))


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def read_original_log(path: str | os.PathLike) -> OriginalLog:
    p = Path(path)
    m = ORIGINAL_NAME.match(p.name)
    if m is None:
        raise InputError("not an original LotusTrace log name (<prefix>_{worker,main}_pid_<pid>)", p)
    role, pid = m.group("role"), int(m.group("pid"))
    if p.stat().st_size == 0:
        _log.warning("%s: empty log", p)
        empty = np.empty(0, np.int64)
        return OriginalLog(p, role, pid, [], [], np.empty(0, np.int32), empty, empty, empty)
    source: Path | bytes = p
    if not _ends_with_newline(p):
        # A crashed writer can cut the last line anywhere, even between digits: do not trust it.
        data = p.read_bytes()
        cut = data.rfind(b"\n") + 1
        _log.warning("%s:%d: last line has no newline (truncated by a crash?); dropped",
                     p, data.count(b"\n", 0, cut) + 1)
        source = data[:cut]
    try:
        import pyarrow as pa

        raw_names, codes, start, dur = _parse_fast(pa.BufferReader(source) if isinstance(source, bytes) else source)
    except Exception:
        raw_names, codes, start, dur = _parse_slow(source if isinstance(source, bytes) else p.read_bytes(), p)

    # Decode the few distinct names once, then map codes vectorised.
    names: list[str] = []
    cats: list[str] = []
    name_index: dict[str, int] = {}
    per_raw_code = np.empty(len(raw_names), np.int32)
    per_raw_batch = np.full(len(raw_names), -1, np.int64)
    for i, raw in enumerate(raw_names):
        prefix, _, suffix = raw.rpartition("_")
        if prefix in _BATCHED and suffix.isdigit():
            (name, cat), batch = _BATCHED[prefix], int(suffix)
        elif raw in _FIXED:
            (name, cat), batch = _FIXED[raw], -1
        elif raw.startswith("S") and len(raw) > 1:
            name, cat, batch = raw[1:], "op", -1
        else:
            first = int(np.argmax(codes == i)) + 1 if len(codes) else 0
            _log.warning("%s:%d: unknown event name %r; kept with category 'unknown'", p, first, raw)
            name, cat, batch = raw, "unknown", -1
        if name not in name_index:
            name_index[name] = len(names)
            names.append(name)
            cats.append(cat)
        per_raw_code[i] = name_index[name]
        per_raw_batch[i] = batch

    code = per_raw_code[codes] if len(codes) else np.empty(0, np.int32)
    batch_id = per_raw_batch[codes] if len(codes) else np.empty(0, np.int64)
    if "fetch" in name_index and len(code):
        # Per-sample and collation lines belong to the batch whose marker follows them.
        marker_pos = np.flatnonzero(code == name_index["fetch"])
        seg = np.diff(np.concatenate([[-1], marker_pos, [len(code) - 1]]))
        following = np.repeat(np.append(batch_id[marker_pos], -1), seg)
        np.copyto(batch_id, following, where=batch_id < 0)
        del following
    return OriginalLog(p, role, pid, names, cats, code, start, dur, batch_id)
