"""``compact_run``: a finished run's trace files, one zstd-compressed file per process.

The parts of a process (:mod:`lotus.trace.parts`) are stitched into one file,
``<process>.lotustrace.zst``: the first part's header (without ``part``), then every part's records in
order, the definitions that rotation repeated at the start of each later part left out, so the result
is the file the process would have written without rotation, compressed (zstd at pyarrow's default
level, through pyarrow). The readers and the scan engine read it as they read any trace file.

Nothing is half-written: the new files are written under ``RUN/.lotus-compact.tmp/``, their record
counts checked against the originals, then each moved into place before its originals are removed. A
failure (a full disk) removes the temporary directory and keeps the original files untouched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from lotus.errors import InputError, LotusError
from lotus.trace import schema as S
from lotus.trace.parts import ZST, iter_records, part_of, stitch

_log = logging.getLogger("lotus.trace")
TMP_DIR = ".lotus-compact.tmp"
CHUNK = 1 << 18


def _write_process(parts: list[Path], out: Path) -> int:
    import pyarrow as pa

    from lotus.trace.native import read_header

    header, _ = read_header(parts[0])
    header = {k: v for k, v in header.items() if k not in ("part", "repeated_defines")}
    header["compacted_from"] = len(parts)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    n = 0
    with pa.output_stream(str(out), compression="zstd", buffer_size=1 << 20) as dst:
        dst.write(S.PREAMBLE.pack(S.MAGIC, len(raw), S.RECORD_SIZE) + raw)
        for k, p in enumerate(parts):
            h, offset = read_header(p)
            skip = int(h.get("repeated_defines", 0)) if k else 0
            for arr in iter_records(p, offset, CHUNK):
                if skip:
                    cut = min(skip, len(arr))
                    arr, skip = arr[cut:], skip - cut
                dst.write(arr.tobytes())
                n += len(arr)
    return n


def compact_run(path: str | os.PathLike, *, keep: bool = False) -> dict:
    """Compact the run at ``path`` (see the module doc). Returns ``{"processes", "events_bytes_before",
    "bytes_after", "records", "files_before", "files_after"}``. Raises :class:`LotusError` (originals kept)."""
    from lotus.trace.discover import find_run

    run = find_run(path, nodes=False)  # a node directory's files stay in it
    if run.original or not run.native:
        raise InputError("only lotus trace files can be compacted (original LotusTrace logs are text)", run.path)
    info = stitch(run.native)
    groups: dict[str, list[Path]] = {}
    for p in sorted(run.native, key=lambda q: info[q]["part"]):
        groups.setdefault(part_of(p)[0], []).append(p)
    tmp = run.path / TMP_DIR
    shutil.rmtree(tmp, ignore_errors=True)  # what an interrupted compaction left
    before = sum(p.stat().st_size for p in run.native)
    written: dict[Path, list[Path]] = {}
    records = 0
    try:
        tmp.mkdir()
        for base, parts in groups.items():
            if len(parts) == 1 and parts[0].name.endswith(ZST) and "part" not in _header(parts[0]):
                continue  # already compact
            out = tmp / (Path(base).name + S.FILE_SUFFIX + ZST)
            expect = sum(_count(p) for p in parts) - sum(int(_header(p).get("repeated_defines", 0))
                                                          for p in parts[1:])
            got = _write_process(parts, out)
            if got != expect:
                raise LotusError(f"compacting {parts[0]}: wrote {got} records, expected {expect}")
            records += got
            written[out] = parts
    except (OSError, LotusError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LotusError(f"cannot compact {run.path}: {why}; the original files are kept") from None
    for out, parts in written.items():
        final = run.path / out.name
        os.replace(out, final)
        if not keep:
            for p in parts:
                if p != final:
                    p.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    after = sum(p.stat().st_size for p in run.path.iterdir() if p.is_file() and p.name.endswith(ZST))
    return {"processes": len(groups), "compacted": len(written), "records": records, "bytes_before": before,
            "bytes_after": after, "files_before": len(run.native)}


def _header(p: Path) -> dict:
    from lotus.trace.native import read_header

    return read_header(p)[0]


def _count(p: Path) -> int:
    from lotus.trace.native import read_header

    _, offset = read_header(p)
    return sum(len(a) for a in iter_records(p, offset, CHUNK))
