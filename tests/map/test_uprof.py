"""AMD uProf report reader on the study's real reports."""

from __future__ import annotations

import pytest

from lotus.errors import InputError
from lotus.map import read_uprof


def test_every_report_parses(amd_dir):
    files = sorted(amd_dir.glob("*/*.csv"))
    assert len(files) == 12
    for f in files:
        df = read_uprof(f)
        lines = f.read_text().splitlines()
        start = next(i for i, ln in enumerate(lines) if "HOTTEST FUNCTIONS" in ln)
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
        assert len(df) == end - start - 2, f  # rows between the header and the blank line
        assert df["cpu_time"].gt(0).all(), f
        assert df["module"].notna().all(), f


def test_values_and_meta(amd_dir):
    df = read_uprof(amd_dir / "Loader" / "1.csv")
    assert list(df.columns) == ["function", "module", "module_path", "cpu_time"]
    first = df.iloc[0]
    assert (first["function"], first["module"], first["cpu_time"]) == ("jpeg_idct_16x16", "libjpeg.so.9.5.0", 2454.0)
    assert first["module_path"].endswith("/envs/amduprof/lib/libjpeg.so.9.5.0")
    assert df["cpu_time"].sum() == pytest.approx(5179.0)  # = the process total of the report
    meta = df.attrs["meta"]
    assert meta["events"] == {"CPU_TIME": "1.000 milliseconds"}
    assert meta["profile_session_type"] == "Time-based Sampling"
    assert "Number of Cores(128)" in meta["cpu_details"]
    gomp = read_uprof(amd_dir / "Collation" / "1.csv")
    assert gomp["function"].iloc[0] == "libgomp-a34b3233.so.1!0x00018b10"
    assert gomp["module"].iloc[0] == "libgomp-a34b3233.so.1"


def test_bad_reports(tmp_path, amd_dir):
    f = tmp_path / "r.csv"
    f.write_text('"AMD uProf"\nPROFILE DETAILS\n')
    with pytest.raises(InputError, match="HOTTEST FUNCTIONS") as err:
        read_uprof(f)
    assert err.value.path == str(f)
    f.write_text('"100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)"\nFUNCTION,Module\n"foo","/lib/libc.so.6"\n')
    with pytest.raises(InputError, match="expected FUNCTION, at least one event") as err:
        read_uprof(f)
    assert err.value.line == 2
    f.write_text('"100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)"\nFUNCTION,"CPU_TIME",Module\n'
                 '"foo",12.0,"/lib/libc.so.6"\n"bar",many,"/lib/libc.so.6"\n\n')
    with pytest.raises(InputError, match="not a number") as err:
        read_uprof(f)
    assert err.value.line == 4
    with pytest.raises(InputError, match="no such file"):
        read_uprof(tmp_path / "missing.csv")
