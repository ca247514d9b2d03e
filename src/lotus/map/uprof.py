"""Reader of AMD uProf CLI CSV reports (``AMDuProfCLI report``): the hottest-functions table.

The report is a sequence of sections; the per-function table follows the line
``"100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)"`` (the count and the event vary) and ends at the
next blank line. Its header is ``FUNCTION,<event>...,Module``.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
from pathlib import Path

from lotus.errors import InputError
from lotus.map.tables import find_column, read_table, read_text
from lotus.map.values import parse_number, snake

_log = logging.getLogger("lotus.map")

_SECTION = re.compile(r'^"?\s*\d*\s*HOTTEST FUNCTIONS\b', re.IGNORECASE)


def _meta(lines: list[str]) -> dict:
    """``Key:,"value"`` lines of the report's header and the sampling interval of each event."""
    meta: dict = {}
    events: dict[str, str] = {}
    in_events = False
    for line in lines:
        if not line.strip():
            in_events = False
            continue
        row = next(csv.reader(io.StringIO(line)))
        if row and row[0].strip().upper() == "MONITORED EVENTS":
            in_events = True
            continue
        if in_events and len(row) >= 3 and not row[0].strip() and row[1].strip():
            events[row[1].strip()] = row[2].strip()
            continue
        if len(row) >= 2 and row[0].rstrip().endswith(":") and row[1].strip():
            meta[snake(row[0].rstrip(":"))] = row[1].strip()
    meta["events"] = events
    return meta


def read_uprof(path: str | os.PathLike):
    """The hottest-functions table of one uProf report as a DataFrame.

    Columns: ``function``, ``module`` (the file name, e.g. ``libjpeg.so.9.5.0``), ``module_path``
    and one float column per event in snake_case (``cpu_time``: the report's values, sample-based).
    ``df.attrs["meta"]`` holds the report header (target, CPU, events and their intervals).
    """
    import pandas as pd

    p = Path(path)
    text = read_text(p)
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _SECTION.match(ln.strip())), None)
    if start is None:
        raise InputError(
            "unknown export layout: no '\"100 HOTTEST FUNCTIONS (Sort Event - ...)\"' section "
            "(expected an AMDuProfCLI report CSV)", p,
        )
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    if end == start + 1:
        raise InputError("the HOTTEST FUNCTIONS section has no header line (expected FUNCTION,<event>,Module)",
                         p, start + 2)
    table = read_table(p, text="\n".join(lines[start + 1:end]), start_line=start + 2)
    fcol = find_column(table.header, "FUNCTION")
    mcol = find_column(table.header, "Module", "MODULE")
    events = [j for j in range(len(table.header)) if j not in (fcol, mcol)]
    if fcol is None or mcol is None or not events:
        raise InputError(
            "missing columns in the HOTTEST FUNCTIONS table: expected FUNCTION, at least one event "
            f"(e.g. CPU_TIME) and Module; found: {', '.join(table.header)}",
            p, table.header_line,
        )
    data: dict[str, list] = {"function": [], "module": [], "module_path": []}
    ev_names = [snake(table.header[j]) for j in events]
    for name in ev_names:
        data[name] = []
    for row, line in zip(table.rows, table.lines, strict=True):
        try:
            values = [parse_number(row[j]) for j in events]
        except ValueError:
            raise InputError(
                f"not a number in an event column ({', '.join(table.header[j] for j in events)}): {row}", p, line
            ) from None
        mod = row[mcol].strip()
        data["function"].append(row[fcol].strip())
        data["module_path"].append(mod or None)
        data["module"].append(mod.replace("\\", "/").rsplit("/", 1)[-1] if mod else None)
        for name, v in zip(ev_names, values, strict=True):
            data[name].append(v)
    df = pd.DataFrame(data)
    for name in ev_names:
        df[name] = df[name].astype("float64")
    if df.empty:
        _log.warning("%s: the HOTTEST FUNCTIONS table is empty", p)
    df.attrs["path"] = str(p)
    df.attrs["meta"] = _meta(lines[:start])
    df.attrs["events"] = ev_names
    df.attrs["lines"] = table.lines
    return df
