"""VTune readers on the study's real exports, and on bad input."""

from __future__ import annotations

import csv
import json
import logging
import math

import pandas as pd
import pytest

from lotus.errors import InputError
from lotus.map import read_vtune_hotspots, read_vtune_summary, read_vtune_uarch


def test_every_uarch_grid_parses(uarch_dir):
    files = sorted(uarch_dir.glob("*.csv"))
    assert len(files) == 3
    for f in files:
        df = read_vtune_uarch(f)
        n_rows = sum(1 for _ in f.open()) - 1
        assert len(df) == n_rows, f
        assert df["function"].notna().all()
        assert df["cpu_time_s"].gt(0).all()
        assert df["module"].isna().all()  # the GUI paste has Module = [Unknown] everywhere


def test_uarch_values_units_and_sources(uarch_dir, golden_dir):
    df = read_vtune_uarch(uarch_dir / "b1024_gpu4_dataloader12.csv")
    row = df.iloc[0]
    # decode_mcu 2006.758s 6,671,840,000,000 10,612,640,000,000 0.629 39.6% 8.7% 39.7% 16.9% ... 3.3 GHz
    assert row["function"] == "decode_mcu"
    assert row["cpu_time_s"] == pytest.approx(2006.758)
    assert row["clockticks"] == 6_671_840_000_000
    assert row["instructions_retired"] == 10_612_640_000_000
    assert row["cpi_rate"] == pytest.approx(0.629)
    assert row["retiring_frac"] == pytest.approx(0.396)
    assert row["bad_speculation_frac"] == pytest.approx(0.397)
    assert row["l1_bound_frac"] == pytest.approx(0.169)
    assert row["average_cpu_frequency_ghz"] == pytest.approx(3.3)
    assert pd.isna(row["source_file"])  # [Unknown]
    memmove = df.loc[df["function"] == "__memmove_avx_unaligned_erms"].iloc[0]
    assert memmove["source_file"] == "memmove-vec-unaligned-erms.S"
    golden = json.loads((golden_dir / "uarch_columns.json").read_text())
    assert {c: str(t) for c, t in df.dtypes.items()} == golden["dtypes"]
    assert df.attrs["source_columns"] == golden["source_columns"]


def test_uarch_comma_cli_layout_gives_the_same_numbers(uarch_dir, tmp_path):
    """A CLI CSV (comma separated, units in the header, plain numbers) reads like the GUI paste."""
    src = uarch_dir / "b1024_gpu4_dataloader12.csv"
    gui = read_vtune_uarch(src)
    rows = list(csv.reader(src.open(), delimiter="\t"))
    header = ["Function" if i == 0 else (h + "(%)" if rows[1][i].endswith("%") else h) for i, h in enumerate(rows[0])]
    out = tmp_path / "cli.csv"
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["vtune: Executing actions 100 % done"])
        w.writerow(header)
        for r in rows[1:]:
            w.writerow([c[:-1] if c.endswith("%") else c.replace(",", "") if c[:1].isdigit() else c for c in r])
    cli = read_vtune_uarch(out)
    assert list(cli["function"]) == list(gui["function"])
    for col in ("cpu_time_s", "clockticks", "retiring_frac", "core_bound_frac", "average_cpu_frequency_ghz"):
        assert cli[col].to_numpy() == pytest.approx(gui[col].to_numpy(), nan_ok=True), col


def test_indented_call_stack_rows_are_left_out_with_a_warning(tmp_path, caplog):
    f = tmp_path / "grid.tsv"
    f.write_text("Function\tCPU Time\tClockticks\nfoo\t2.0s\t10\n  caller_of_foo\t1.0s\t5\nbar\t1.0s\t3\n")
    with caplog.at_level(logging.WARNING, logger="lotus.map"):
        df = read_vtune_uarch(f)
    assert list(df["function"]) == ["foo", "bar"]
    assert "indented call-stack row" in caplog.text and "line 3" in caplog.text


def test_every_hotspot_report_parses(intel_dir):
    files = sorted(intel_dir.glob("*/*.csv"))
    assert len(files) == 30
    for f in files:
        df = read_vtune_hotspots(f)
        assert len(df) == sum(1 for _ in csv.reader(f.open())) - 1, f
        assert df["module"].notna().all(), f
        assert df["cpu_time_s"].ge(0).all(), f


def test_hotspot_values(intel_dir):
    df = read_vtune_hotspots(intel_dir / "Loader" / "1.csv")
    first = df.iloc[0]
    assert (first["function"], first["module"]) == ("jpeg_idct_16x16", "libjpeg.so.9")
    assert first["cpu_time_s"] == pytest.approx(2.388030)
    assert first["cpu_time_effective_time_s"] == pytest.approx(2.388030)
    assert first["start_address"] == "0x2b2f0"
    # Quoted names holding commas (C++ templates) stay whole.
    coll = read_vtune_hotspots(intel_dir / "Collation" / "4.csv")
    assert coll["function"].iloc[0].startswith("c10::function_ref<void (char**, long const*, long, long)>")
    assert coll["module"].iloc[0] == "libtorch_cpu.so"
    assert coll["cpu_time_spin_time_imbalance_or_serial_spinning_s"].iloc[1] == pytest.approx(3.052777)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("", "empty file", None),
        ("Module,CPU Time\nlibc.so.6,1.0\n", "expected a function column", 1),
        ("Function,Module\nfoo,libc.so.6\n", "missing column 'CPU Time'", 1),
        ("Function,CPU Time\nfoo,1.0,extra,cells\n", "more cells than the header", 2),
    ],
)
def test_hotspot_bad_input_names_file_line_and_columns(tmp_path, text, message, line):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        read_vtune_hotspots(f)
    assert err.value.path == str(f)
    assert err.value.line == line
    assert str(err.value).startswith(str(f))


def test_uarch_unknown_layout(tmp_path):
    f = tmp_path / "grid.csv"
    f.write_text("Function,Module\nfoo,libc.so.6\n")
    with pytest.raises(InputError, match="'CPU Time' or 'Clockticks'"):
        read_vtune_uarch(f)
    with pytest.raises(InputError, match="no such file"):
        read_vtune_uarch(tmp_path / "missing.csv")


def test_summary_text_and_csv(tmp_path):
    # Layouts of `vtune -report summary` (text) and `-format csv` (Hierarchy Level/Metric Name/Metric Value);
    # written here by hand: the study's data holds no summary file.
    text = tmp_path / "b8_summary.txt"
    text.write_text(
        "vtune: Using result path `/tmp/r000ue'\n"
        "Elapsed Time: 1016.784s\n"
        "    Clockticks: 11,937,100,000,000\n"
        "    Instructions Retired: 18,123,400,000,000\n"
        "    CPI Rate: 0.659\n"
        "    Retiring: 45.3% of Pipeline Slots\n"
        "    Average CPU Frequency: 3.3 GHz\n"
        "    Total Thread Count: 52\n"
        "Collection and Platform Info\n"
        "    Application Command Line: python train.py\n"
    )
    s = read_vtune_summary(text)
    assert s["elapsed_time_s"] == pytest.approx(1016.784)
    assert s["clockticks"] == 11_937_100_000_000
    assert s["retiring_frac"] == pytest.approx(0.453)
    assert s["average_cpu_frequency_ghz"] == pytest.approx(3.3)
    assert s["total_thread_count"] == 52
    assert s["application_command_line"] == "python train.py"
    csvf = tmp_path / "summary.csv"
    csvf.write_text("Hierarchy Level,Metric Name,Metric Value\n0,Elapsed Time,12.5\n1,CPU Time,20.25\n1,CPI Rate,0.8\n")
    s = read_vtune_summary(csvf)
    assert (s["elapsed_time_s"], s["cpu_time_s"], s["cpi_rate"]) == (12.5, 20.25, 0.8)
    bad = tmp_path / "nosummary.txt"
    bad.write_text("CPU Time: 1s\n")
    with pytest.raises(InputError, match="no 'Elapsed Time'"):
        read_vtune_summary(bad)
    assert not math.isnan(s["cpi_rate"])
