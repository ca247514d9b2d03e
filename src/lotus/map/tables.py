"""Reading delimited text exports (TAB, comma or semicolon) with line numbers, for readers' errors."""

from __future__ import annotations

import csv
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from lotus.errors import InputError

_log = logging.getLogger("lotus.map")


@dataclass
class Table:
    """Rows of a delimited export; ``lines[i]`` is the 1-based file line of ``rows[i]``."""

    path: Path
    delimiter: str
    header: list[str]
    header_line: int
    rows: list[list[str]]
    lines: list[int]


def read_text(path: str | os.PathLike) -> str:
    p = Path(path)
    if not p.exists():
        raise InputError("no such file", p)
    if p.is_dir():
        raise InputError("is a directory, expected a file", p)
    data = p.read_bytes()
    for enc in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            pass
    _log.warning("%s: not UTF-8, read as Latin-1", p)
    return data.decode("latin-1")


def sniff_delimiter(line: str) -> str:
    """TAB if the line has one, else the more frequent of ``;`` and ``,`` outside quotes."""
    if "\t" in line:
        return "\t"
    outside = "".join(part for i, part in enumerate(line.split('"')) if i % 2 == 0)
    return ";" if outside.count(";") > outside.count(",") else ","


def read_table(path: str | os.PathLike, *, text: str | None = None, start_line: int = 1) -> Table:
    """The first table of ``text`` (default: the file), from its first non-blank, non-log line.

    Lines before the header that start with ``vtune:`` (VTune's warnings on stdout) are skipped
    with a log message. Rows are padded or cut to the header's width; an empty file raises
    :class:`InputError`.
    """
    p = Path(path)
    if text is None:
        text = read_text(p)
    raw_lines = text.splitlines()
    i = 0
    while i < len(raw_lines) and (not raw_lines[i].strip() or raw_lines[i].lstrip().lower().startswith("vtune:")):
        if raw_lines[i].strip():
            _log.info("%s:%d: skipped log line %r", p, start_line + i, raw_lines[i][:120])
        i += 1
    if i >= len(raw_lines):
        raise InputError("empty file: no header line", p)
    delimiter = sniff_delimiter(raw_lines[i])
    body = "\n".join(raw_lines[i:])
    reader = csv.reader(io.StringIO(body), delimiter=delimiter)
    header: list[str] | None = None
    header_line = start_line + i
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for row in reader:
            line_no = start_line + i + reader.line_num - 1
            if header is None:
                header = [h.strip() for h in row]
                continue
            if not any(c.strip() for c in row):
                continue
            rows.append(row)
            lines.append(line_no)
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", p, start_line + i + reader.line_num - 1) from None
    assert header is not None
    width = len(header)
    short = [ln for r, ln in zip(rows, lines, strict=True) if len(r) < width]
    if short:
        _log.warning("%s: %d row(s) shorter than the header (first at line %d), padded with missing values",
                     p, len(short), short[0])
    long_rows = [ln for r, ln in zip(rows, lines, strict=True) if len(r) > width]
    if long_rows:
        raise InputError(f"row has more cells than the header's {width} columns", p, long_rows[0])
    rows = [r + [""] * (width - len(r)) for r in rows]
    return Table(p, delimiter, header, header_line, rows, lines)


def find_column(header: list[str], *candidates: str) -> int | None:
    """Index of the first header equal (case-insensitive) to one of ``candidates``."""
    low = [h.strip().lower() for h in header]
    for c in candidates:
        if c.lower() in low:
            return low.index(c.lower())
    return None
