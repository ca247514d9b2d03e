"""Rotated and compressed trace files: opening them, and stitching a process's parts back together.

A writer with rotation on (:mod:`lotus.trace.writer`) writes one process's records into parts::

    lotus-r0-w1-p4242.lotustrace                part 0 (header "part": 0)
    lotus-r0-w1-p4242.part0001.lotustrace       part 1 (same header and anchor, "part": 1)
    lotus-r0-w1-p4242.part0002.lotustrace.zst   part 2, zstd-compressed once closed

Every part is a complete trace file (its own header and the definitions made so far), so the readers
read parts as files; this module adds what only the set of parts knows: which part is the last (the
others have no END record because the process went on, not because it died) and which parts are
missing (a warning naming the gap in time; the rest is analysed).
"""

from __future__ import annotations

import io
import logging
import os
import re
from pathlib import Path

from lotus.trace import schema as S

_log = logging.getLogger("lotus.trace")
ZST = S.ZST
SUFFIXES = (S.FILE_SUFFIX, S.FILE_SUFFIX + ZST)
_PART = re.compile(r"^(?P<base>.+?)(?:\.part(?P<k>\d{4,}))?\.lotustrace(?:\.zst)?$")


def is_trace_name(name: str) -> bool:
    return name.endswith(SUFFIXES)


def part_of(path: Path) -> tuple[str, int]:
    """(process key, part number) from a file name: ``("lotus-r0-w1-p4242", 2)``."""
    m = _PART.match(path.name)
    if m is None:
        return path.name, 0
    return str(path.parent / m["base"]), int(m["k"] or 0)


def spans_for(spans: dict | None, path: Path):
    """The :class:`lotus.trace.native.SampleSpans` deriver of ``path``: the previous part's when ``path``
    is the next part of the same process, read right after it (the readers read a run's files sorted:
    a process's parts in order), so that an item whose op records end one part and whose ``sample``
    record starts the next gets its spans; else a new one. ``spans``: the reader's ``{process: (part,
    deriver)}`` (None: a new deriver)."""
    from lotus.trace.native import SampleSpans

    if spans is None:
        return SampleSpans()
    base, k = part_of(path)
    prev = spans.get(base)
    derive = prev[1] if prev is not None and prev[0] == k - 1 else SampleSpans()
    spans[base] = (k, derive)
    return derive


def stitch(paths: list[Path]) -> dict[Path, dict]:
    """Per part file: ``{"part": k, "last": bool}``, parts of one process in order; warns about gaps."""
    groups: dict[str, dict[int, Path]] = {}
    for p in paths:
        base, k = part_of(p)
        groups.setdefault(base, {})[k] = p
    out: dict[Path, dict] = {}
    for base, parts in groups.items():
        ks = sorted(parts)
        for k in ks:
            out[parts[k]] = {"part": k, "last": k == ks[-1], "parts": len(ks)}
        missing = sorted(set(range(ks[-1] + 1)) - set(ks))
        if missing:
            _warn_gap(base, parts, missing)
    return out


def _warn_gap(base: str, parts: dict[int, Path], missing: list[int]) -> None:
    """One warning per run of missing parts, naming the time between the neighbouring parts' events."""
    runs: list[list[int]] = []
    for k in missing:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    for r in runs:
        before, after = parts.get(r[0] - 1), parts.get(r[-1] + 1)
        t0 = _edge_time(before, last=True) if before else None
        t1 = _edge_time(after, last=False) if after else None
        label = f"part {r[0]}" if len(r) == 1 else f"parts {r[0]}-{r[-1]}"
        span = ""
        if t0 is not None and t1 is not None:
            span = f": no events of this process from {_wall(t0)} to {_wall(t1)} ({(t1 - t0) / 1e9:.3g} s)"
        elif t1 is not None:
            span = f": no events of this process before {_wall(t1)}"
        _log.warning("%s: %s of the trace missing%s; analysing the other parts", Path(base).name, label, span)


def _wall(ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _edge_time(path: Path, *, last: bool) -> int | None:
    """Wall-clock ns of the first (``last=False``) or last event of a part (its end, for the last)."""
    import numpy as np

    from lotus.errors import InputError
    from lotus.trace.native import RECORD_DTYPE, open_raw, read_header

    try:
        header, offset = read_header(path)
    except (InputError, OSError):
        return None
    shift = int(header["anchor_wall_ns"]) - int(header["anchor_mono_ns"])
    found = None
    with open_raw(path) as f:
        f.read(offset)
        while True:
            raw = f.read(S.RECORD_SIZE * (1 << 16))
            if not raw:
                break
            rec = np.frombuffer(raw[: len(raw) // S.RECORD_SIZE * S.RECORD_SIZE], RECORD_DTYPE)
            ev = rec[rec["name_id"] >= 0]
            if len(ev):
                end = ev["start_ns"] + np.maximum(ev["dur_ns"], 0)
                if not last:
                    return int(ev["start_ns"].min()) + shift
                found = int(end.max()) if found is None else max(found, int(end.max()))
    return None if found is None else found + shift


def _cut(buf, filled: int) -> int:
    """Bytes of ``buf[:filled]`` to hand out as whole records: never a packed batch record without the
    loop record written right after it (:mod:`lotus.trace.packed`), which may still be unread."""
    whole = filled // S.RECORD_SIZE * S.RECORD_SIZE
    if whole and int.from_bytes(bytes(buf[whole - S.RECORD_SIZE: whole - S.RECORD_SIZE + 2]), "little",
                                signed=True) == S.EV_MAIN_BATCH:
        whole -= S.RECORD_SIZE
    return whole


def iter_records(path: Path, offset: int, chunk_records: int):
    """The records of a trace file or part after ``offset``, as numpy arrays of up to ``chunk_records``;
    a truncated last record (crash mid-write) is dropped with a warning.

    A plain file is mapped a chunk at a time (:func:`_mapped_chunks`: no copy of its bytes from the page
    cache), a compressed one (or a file that cannot be mapped) read (:func:`_read_chunks`); the chunks are
    the same either way. The arrays are read-only, each valid until the next one is asked for (a mapped
    chunk's pages then leave this process: read again from the page cache if touched); callers copy what
    they keep (fancy indexing does)."""
    from lotus.trace.native import open_raw

    chunk = max(chunk_records, 2)  # room for a packed pair
    with open_raw(path) as f:
        done = (yield from _mapped_chunks(f, offset, chunk)) if isinstance(f, io.BufferedReader) else None
        if done is None:
            f.seek(offset) if f.seekable() else f.read(offset)
            done = yield from _read_chunks(f, chunk, fill=isinstance(f, io.BufferedReader))
    n, rest = done
    if rest:
        _log.warning("%s: record %d truncated (%d of %d bytes, a crashed process?); dropped", path, n, rest,
                     S.RECORD_SIZE)


def _read_chunks(f, chunk: int, fill: bool = False):
    """The records of ``f`` from where it stands, read in chunks (:func:`_cut`): of up to ``chunk`` with
    ``fill`` (a held-back record and the next reads fill one chunk: the chunks :func:`_mapped_chunks`
    makes), else each read of ``chunk`` records after what the last one held back (a compressed file's
    chunks, as lotus always cut them). Returns (records, bytes of a truncated last record)."""
    import numpy as np

    from lotus.trace.native import RECORD_DTYPE

    n, tail = 0, b""
    while True:
        raw = f.read(chunk * S.RECORD_SIZE - (len(tail) if fill else 0))
        if not raw:
            break
        data = tail + raw if tail else raw
        whole = _cut(data, len(data))
        tail = data[whole:]
        if whole:
            arr = np.frombuffer(data, RECORD_DTYPE, count=whole // S.RECORD_SIZE)
            n += len(arr)
            yield arr
    whole = len(tail) // S.RECORD_SIZE
    if whole:  # a packed batch record held back for its pair, and the file ends there
        n += whole
        yield np.frombuffer(tail, RECORD_DTYPE, count=whole)
    return n, len(tail) - whole * S.RECORD_SIZE


def _mapped_chunks(f, offset: int, chunk: int):
    """The records of the open plain file ``f`` after ``offset`` in chunks of up to ``chunk``, each a
    read-only view of a mapping of its pages (``MAP_POPULATE``: mapped in one call, not faulted a page at a
    time); a chunk that ends on a packed batch record leaves it to the next one, as :func:`_cut` (the last
    record of the file excepted). The previous chunk's pages leave this process (``MADV_DONTNEED``) before
    the next is mapped: its resident memory stays that of one chunk. A file that grows while it is read (a
    live run) is read to its size when the reading reaches the end. Returns (records, bytes of a truncated
    last record), or None where the file cannot be mapped (nothing yielded)."""
    import mmap

    import numpy as np

    from lotus.trace.native import RECORD_DTYPE

    fd = f.fileno()
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
    pos, prev, size = 0, None, 0
    while True:
        size = max(os.fstat(fd).st_size - offset, 0)
        total = size // S.RECORD_SIZE
        if pos >= total:
            break
        while pos < total:
            end = min(pos + chunk, total)
            first = offset + pos * S.RECORD_SIZE
            base = first - first % mmap.ALLOCATIONGRANULARITY
            if prev is not None:
                prev.madvise(mmap.MADV_DONTNEED)
            try:
                prev = mmap.mmap(fd, offset + end * S.RECORD_SIZE - base, flags=flags, prot=mmap.PROT_READ,
                                 offset=base)
            except (OSError, ValueError):
                if pos == 0:  # a file system without mmap: read instead
                    return None
                raise
            arr = np.frombuffer(prev, RECORD_DTYPE, count=end - pos, offset=first - base)
            if end - pos > 1 and arr["name_id"][-1] == S.EV_MAIN_BATCH:
                arr = arr[:-1]
            pos += len(arr)
            yield arr
            del arr
    if prev is not None:
        prev.madvise(mmap.MADV_DONTNEED)
    return pos, size - pos * S.RECORD_SIZE


def mark_continued(files: list[dict], info: dict) -> None:
    """``clean_close`` of a part that a later part continues: None (the process went on)."""
    for f in files:
        meta = info.get(Path(f["path"]))
        if meta is not None and meta["parts"] > 1:
            f["part"] = meta["part"]
            if not meta["last"]:
                f["clean_close"] = None
