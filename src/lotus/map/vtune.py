"""Readers of Intel VTune exports: hotspot reports, microarchitecture grids and summaries.

* :func:`read_vtune_hotspots` - ``vtune -report hotspots -format csv`` (one row per function).
* :func:`read_vtune_uarch` - a Microarchitecture Exploration grid grouped by Source Function /
  Function / Call Stack, pasted from the GUI (TAB separated, ``2215.113s``, ``45.3%``...) or a CLI
  CSV report of such a result.
* :func:`read_vtune_summary` - ``vtune -report summary`` as text or CSV (elapsed time...).

Each returns a pandas DataFrame (or a dict for summaries); bad input raises
:class:`lotus.errors.InputError` naming the file, the line and the columns expected.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path

from lotus.errors import InputError
from lotus.map.tables import Table, find_column, read_table, read_text
from lotus.map.values import column_names, is_missing, numeric_column, parse_cell, snake, to_unit

_log = logging.getLogger("lotus.map")

FUNCTION_HEADERS = (
    "Source Function / Function / Call Stack",
    "Function / Call Stack",
    "Source Function / Function",
    "Function",
    "Source Function",
)
MODULE_HEADERS = ("Module",)
UARCH_NEEDS = ("CPU Time", "Clockticks")  # at least one of them


def _frame(table: Table, *, leaf: bool, keep_children: bool = False):
    """The DataFrame of a function table: ``function``, ``module`` then its columns, typed."""
    import pandas as pd

    fcol = find_column(table.header, *FUNCTION_HEADERS)
    if fcol is None:
        raise InputError(
            "unknown export layout: expected a function column "
            f"({' or '.join(repr(h) for h in FUNCTION_HEADERS[:4])}); found columns: {_shown(table.header)}",
            table.path,
            table.header_line,
        )
    rows, lines = table.rows, table.lines
    children = [i for i, r in enumerate(rows) if r[fcol][:1].isspace()]
    if children and not keep_children:
        # Expanded call stacks in a grouped grid are indented: only the top level is a function's total.
        _log.warning(
            "%s: %d indented call-stack row(s) (first at line %d) left out: only top-level function rows are totals",
            table.path, len(children), lines[children[0]],
        )
        skip = set(children)
        rows = [r for i, r in enumerate(rows) if i not in skip]
        lines = [ln for i, ln in enumerate(lines) if i not in skip]
    names = column_names(table.header, leaf=leaf)
    mcol = find_column(table.header, *MODULE_HEADERS)
    data: dict[str, list] = {
        "function": [r[fcol].strip() for r in rows],
        "module": [None if is_missing(r[mcol]) else r[mcol].strip() for r in rows] if mcol is not None
        else [None] * len(rows),
    }
    sources = {"function": table.header[fcol]}
    if mcol is not None:
        sources["module"] = table.header[mcol]
    for j, header in enumerate(table.header):
        if j in (fcol, mcol):
            continue
        cells = [r[j] for r in rows]
        num = numeric_column(header, cells)
        if num is None:
            name = names[j]
            data[name] = [None if is_missing(c) else c.strip() for c in cells]
        else:
            values, suffix = num
            base = names[j]
            name = base if base.endswith(suffix) else base + suffix
            data[name] = values
        sources[name] = header
    df = pd.DataFrame(data)
    for col, values in data.items():
        if values and isinstance(values[0], float):
            df[col] = df[col].astype("float64")
    df.attrs["path"] = str(table.path)
    df.attrs["source_columns"] = sources
    df.attrs["lines"] = lines
    return df


def _shown(header: list[str]) -> str:
    cols = ", ".join(repr(h) for h in header[:8])
    return cols + (", ..." if len(header) > 8 else "") if header else "(none)"


def read_vtune_hotspots(path: str | os.PathLike):
    """One ``vtune -report hotspots -format csv`` file: a row per function.

    Columns: ``function``, ``module`` (None when unknown), ``cpu_time_s`` and the report's other
    columns in snake_case with units (``cpu_time_effective_time_s``, ``function_full``...).
    """
    table = read_table(path)
    df = _frame(table, leaf=False)
    if "cpu_time_s" not in df.columns:
        raise InputError(
            "missing column 'CPU Time' (expected columns: 'Function', 'CPU Time', 'Module'); "
            f"found: {_shown(table.header)}",
            table.path, table.header_line,
        )
    if df["module"].isna().all() and find_column(table.header, *MODULE_HEADERS) is None:
        _log.warning("%s: no 'Module' column: functions are keyed 'func|[Unknown]'", table.path)
    bad = df["cpu_time_s"].isna()
    if bad.any():
        first = df.attrs["lines"][int(bad.to_numpy().nonzero()[0][0])]
        _log.warning("%s: %d row(s) without a CPU Time (first at line %d) count as 0 s",
                     table.path, int(bad.sum()), first)
        df["cpu_time_s"] = df["cpu_time_s"].fillna(0.0)
    return df


def read_vtune_uarch(path: str | os.PathLike):
    """A VTune microarchitecture grid (GUI paste or CLI CSV) as a DataFrame, one row per function.

    Numeric columns are parsed from ``2215.113s`` (``cpu_time_s``), ``7,206,448,000,000``
    (``clockticks``), ``45.3%`` (as a fraction: ``retiring_frac`` = 0.453) and ``3.3 GHz``
    (``average_cpu_frequency_ghz``); ``[Unknown]`` is missing. Column names are the snake_case of the
    last part of the header (``Back-End Bound:Memory Bound:L1 Bound`` -> ``l1_bound_frac``).
    ``df.attrs["source_columns"]`` maps them back to the original headers.
    """
    table = read_table(path)
    df = _frame(table, leaf=True)
    have = [c for c in ("cpu_time_s", "clockticks") if c in df.columns]
    if not have:
        raise InputError(
            "unknown export layout: a microarchitecture grid needs 'CPU Time' or 'Clockticks' besides "
            f"the function column (e.g. 'Source Function / Function / Call Stack'); found: {_shown(table.header)}",
            table.path, table.header_line,
        )
    if df.empty:
        _log.warning("%s: no function rows", table.path)
    return df


_SUMMARY_LINE = re.compile(r"^(?P<indent>\s*)(?P<name>[^:]+?):\s*(?P<value>\S.*?)\s*$")


def read_vtune_summary(path: str | os.PathLike) -> dict:
    """A ``vtune -report summary`` (text, or CSV with 'Metric Name' and 'Metric Value' columns).

    Returns ``{metric_key: value}`` with numbers parsed (seconds, fractions, GHz as in
    :func:`read_vtune_uarch`) and ``elapsed_time_s`` always present; raises :class:`InputError`
    when the file holds no elapsed time.
    """
    p = Path(path)
    text = read_text(p)
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.lower().startswith("vtune:")), "")
    out: dict = {}
    if "metric name" in first.lower() and "metric value" in first.lower():
        table = read_table(p, text=text)
        n = find_column(table.header, "Metric Name")
        v = find_column(table.header, "Metric Value")
        for row in table.rows:
            _put(out, row[n], row[v])
    else:
        for line in text.splitlines():
            m = _SUMMARY_LINE.match(line)
            if m and not line.lower().startswith("vtune:"):
                _put(out, m.group("name"), m.group("value"))
    if "elapsed_time_s" not in out:
        raise InputError("not a VTune summary: no 'Elapsed Time' (expected 'Elapsed Time: 12.3s' lines or "
                         "'Metric Name'/'Metric Value' columns)", p)
    out["path"] = str(p)
    return out


def _put(out: dict, name: str, value: str) -> None:
    key = snake(name)
    if key in out:
        return  # the first (top-level) occurrence wins
    parsed = parse_cell(value.split(" of ", maxsplit=1)[0].strip() if value else value)
    if parsed is None:
        out[key] = value.strip()
        return
    val, unit = parsed
    if math.isnan(val):
        return
    if unit is None and key in ("elapsed_time", "cpu_time", "paused_time"):
        unit = "s"
    suffix = {"%": "_frac", "s": "_s", "ms": "_s", "us": "_s", "ns": "_s", "GHz": "_ghz", "MHz": "_ghz"}.get(unit, "")
    out[key + suffix if not key.endswith(suffix) else key] = to_unit(val, unit)
