"""Cells and columns of profiler exports: ``2215.113s``, ``7,206,448,000,000``, ``45.3%``, ``3.3 GHz``.

VTune writes numbers with units and thousands separators in GUI grids, and plain numbers with the
unit in the header (``Retiring(%)``) or implied (``CPU Time`` in seconds) in CLI reports. These
helpers turn both into floats with the unit moved into the column name (``_s``, ``_frac``,
``_ghz``); percentages become fractions (``45.3%`` -> 0.453). ``[Unknown]`` and empty cells are
missing (NaN).
"""

from __future__ import annotations

import math
import re

MISSING = frozenset({"", "[unknown]", "n/a", "na", "-", "--", "none", "nan"})

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_WITH_UNIT = re.compile(r"^(?P<num>[+-]?[\d,]*\.?\d+(?:[eE][+-]?\d+)?)\s*(?P<unit>%|s|ms|us|µs|ns|GHz|MHz|KHz|Hz)$")

# unit as written -> (column suffix, factor to the suffix's unit)
UNITS: dict[str, tuple[str, float]] = {
    "%": ("_frac", 0.01),
    "s": ("_s", 1.0),
    "ms": ("_s", 1e-3),
    "us": ("_s", 1e-6),
    "µs": ("_s", 1e-6),
    "ns": ("_s", 1e-9),
    "GHz": ("_ghz", 1.0),
    "MHz": ("_ghz", 1e-3),
    "KHz": ("_ghz", 1e-6),
    "Hz": ("_ghz", 1e-9),
}

# Headers (or their last ':' part) whose plain numbers are seconds in VTune CLI reports.
SECONDS_HEADERS = ("cpu time", "elapsed time", "wait time", "spin time", "overhead time", "effective time",
                   "paused time", "inactive time")


def is_missing(cell: str | None) -> bool:
    return cell is None or cell.strip().lower() in MISSING


def parse_cell(cell: str | None) -> tuple[float, str | None] | None:
    """``(value, unit)`` of a numeric cell, ``(nan, None)`` for a missing one, None for text.

    The value is in the cell's own unit (``45.3%`` -> ``(45.3, "%")``); see :func:`to_unit`.
    """
    if is_missing(cell):
        return (math.nan, None)
    text = cell.strip()
    if _NUMBER.match(text):
        return (float(text), None)
    if _THOUSANDS.match(text):
        return (float(text.replace(",", "")), None)
    m = _WITH_UNIT.match(text)
    if m:
        num = m.group("num")
        if "," in num:
            if not _THOUSANDS.match(num):
                return None
            num = num.replace(",", "")
        return (float(num), m.group("unit"))
    return None


def to_unit(value: float, unit: str | None) -> float:
    """A parsed value in the unit of its column suffix (seconds, fraction, GHz)."""
    if unit is None:
        return value
    return value * UNITS[unit][1]


def parse_number(cell: str | None) -> float:
    """One cell as a float in its column's unit (``45.3%`` -> 0.453, ``2,000`` -> 2000.0, ``[Unknown]`` -> nan).

    Raises ValueError for text that is not a number.
    """
    parsed = parse_cell(cell)
    if parsed is None:
        raise ValueError(f"not a number: {cell!r}")
    return to_unit(*parsed)


def snake(text: str) -> str:
    """``Front-End Bound`` -> ``front_end_bound``; ``Function (Full)`` -> ``function_full``."""
    s = re.sub(r"[^0-9a-zA-Z]+", "_", text.strip()).strip("_").lower()
    return s or "column"


def header_unit(header: str) -> tuple[str, str | None]:
    """A header without a unit marker, and that unit: ``Retiring(%)`` -> ``("Retiring", "%")``."""
    m = re.match(r"^(?P<name>.*?)\s*[(\[](?P<unit>%|s|ms|us|ns|GHz|MHz)[)\]]\s*$", header)
    if m:
        return m.group("name"), m.group("unit")
    return header, None


def column_names(headers: list[str], *, leaf: bool) -> list[str]:
    """snake_case names for headers; ``leaf`` keeps only the last ``A:B:C`` part unless two collide."""
    full = [snake(header_unit(h)[0].replace(":", " ")) for h in headers]
    if not leaf:
        return _dedupe(full)
    short = [snake(header_unit(h)[0].split(":")[-1]) for h in headers]
    counts: dict[str, int] = {}
    for s in short:
        counts[s] = counts.get(s, 0) + 1
    return _dedupe([s if counts[s] == 1 else f for s, f in zip(short, full, strict=True)])


def _dedupe(names: list[str]) -> list[str]:
    from lotus._names import dedupe

    return dedupe(names, "_")


def numeric_column(header: str, cells: list[str | None]) -> tuple[list[float], str] | None:
    """Floats and the name suffix of a column whose cells are all numbers (or missing); else None.

    The unit comes from the cells (``2.0s``), else from the header (``Retiring(%)``), else from
    known VTune time headers (``CPU Time`` -> seconds).
    """
    parsed = []
    units: set[str] = set()
    for c in cells:
        p = parse_cell(c)
        if p is None:
            return None
        parsed.append(p)
        if p[1] is not None:
            units.add(p[1])
    if not any(not math.isnan(v) for v, _ in parsed):
        return None  # all missing: leave it a text column
    suffixes = {UNITS[u][0] for u in units}
    if len(suffixes) > 1:
        return None
    name, head_unit = header_unit(header)
    default_unit = head_unit
    if default_unit is None and not units and any(p.strip().lower() in SECONDS_HEADERS for p in name.split(":")):
        default_unit = "s"
    values = [to_unit(v, u if u is not None else default_unit) for v, u in parsed]
    unit = next(iter(units)) if units else default_unit
    return values, (UNITS[unit][0] if unit else "")
