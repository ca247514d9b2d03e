"""Cells and column names of profiler exports."""

from __future__ import annotations

import math

import pytest

from lotus.map.values import column_names, header_unit, numeric_column, parse_cell, parse_number, snake


@pytest.mark.parametrize(
    ("cell", "value"),
    [
        ("2215.113s", 2215.113),
        ("7,206,448,000,000", 7206448000000.0),
        ("45.3%", 0.453),
        ("3.3 GHz", 3.3),
        ("800 MHz", 0.8),
        ("0.629", 0.629),
        ("12ms", 0.012),
        ("-1.5", -1.5),
        ("1e3", 1000.0),
        ("1,234.5s", 1234.5),
    ],
)
def test_parse_number(cell, value):
    assert parse_number(cell) == pytest.approx(value)


@pytest.mark.parametrize("cell", ["[Unknown]", "", "  ", "N/A", "-"])
def test_missing_cells_are_nan(cell):
    assert math.isnan(parse_number(cell))


@pytest.mark.parametrize("cell", ["decode_mcu", "0x2b2f0", "1,23,4", "3.3 parsecs", "libjpeg.so.9"])
def test_text_is_not_a_number(cell):
    assert parse_cell(cell) is None
    with pytest.raises(ValueError, match="not a number"):
        parse_number(cell)


def test_snake_and_header_units():
    assert snake("Front-End Bound") == "front_end_bound"
    assert snake("Function (Full)") == "function_full"
    assert snake("Source Function / Function / Call Stack") == "source_function_function_call_stack"
    assert header_unit("Retiring(%)") == ("Retiring", "%")
    assert header_unit("CPU Time [s]") == ("CPU Time", "s")
    assert header_unit("CPI Rate") == ("CPI Rate", None)


def test_column_names_leaf_and_collisions():
    headers = ["Back-End Bound:Memory Bound:L1 Bound", "CPU Time:Spin Time:Other", "CPU Time:Overhead Time:Other"]
    assert column_names(headers, leaf=True) == ["l1_bound", "cpu_time_spin_time_other", "cpu_time_overhead_time_other"]
    assert column_names(["A", "A"], leaf=False) == ["a", "a_2"]


def test_numeric_column_units():
    assert numeric_column("CPU Time", ["1.5s", "[Unknown]"])[1] == "_s"
    values, suffix = numeric_column("Retiring(%)", ["45.3", "10"])
    assert suffix == "_frac" and values == pytest.approx([0.453, 0.10])
    values, suffix = numeric_column("CPU Time:Effective Time", ["2.0", "0.5"])  # CLI report: seconds implied
    assert suffix == "_s" and values == [2.0, 0.5]
    assert numeric_column("Module", ["libc.so.6", "[Unknown]"]) is None
    assert numeric_column("Mixed", ["1s", "50%"]) is None
    assert numeric_column("Empty", ["[Unknown]", ""]) is None
