"""`lotus map import` and `lotus hw` through the CLI, and their errors for people."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from lotus.cli import cli
from lotus.map import import_mapping


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_help_lists_the_commands():
    res = _run("--help")
    assert res.exit_code == 0 and " map " in res.output and " hw " in res.output
    res = _run("map", "--help")
    assert res.exit_code == 0 and "run" in res.output and "import" in res.output


@pytest.mark.timeout(60)
def test_import_lotus_map_stays_light():
    code = ("import sys, lotus.map; import lotus.commands.map; "
            "print(sorted(m for m in ('pandas', 'numpy', 'matplotlib', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_map_import_uprof(amd_dir, tmp_path):
    out = tmp_path / "m.json"
    res = _run("map", "import", "--uprof", str(amd_dir), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "6 op(s), 12 run file(s)" in res.output
    assert "Loader" in res.output and "jpeg_idct_16x16 47%" in res.output
    written = json.loads(out.read_text())
    expected = import_mapping(amd_dir, "uprof")
    assert written == json.loads(json.dumps(expected))


def test_map_import_vtune_with_min_support(intel_dir, tmp_path):
    out = tmp_path / "m.json"
    res = _run("map", "import", "--vtune", str(intel_dir), "--min-support", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())
    assert m["op_to_func"]["RandomHorizontalFlip"] == ["ImagingFlipLeftRight|_imaging.cpython-310-x86_64-linux-gnu.so"]
    assert m["lotus"]["min_support"] == 1.0


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["map", "import", "--out", "x.json"], 2, "exactly one of --vtune DIR or --uprof DIR"),
        (["map", "import", "--vtune", "a", "--uprof", "b", "--out", "x.json"], 2, "exactly one of"),
        (["map", "import", "--vtune", "no/such/dir", "--out", "x.json"], 1,
         "lotus: error: no/such/dir: no such directory"),
        (["map", "import", "--vtune", "{uarch}", "--out", "x.json"], 1, "<dir>/<Op>/<run>.csv"),
        (["map", "import", "--uprof", "{intel}", "--out", "x.json"], 1, "no readable uprof run file"),
        (["map", "import", "--uprof", "{amd}", "--min-support", "2", "--out", "x.json"], 2, "--min-support"),
        (["map", "run", "--backend", "perf", "--out", "x.json"], 2, "'perf' is not one of"),
        (["hw", "--mapping", "{bad_mapping}", "--uarch-dir", "{uarch}", "--out-dir", "o"], 1, "must be a list"),
        (["hw", "--mapping", "{study}", "--uarch-dir", "no/dir", "--out-dir", "o"], 1,
         "no/dir: no such file or directory"),
        (["hw", "--mapping", "{study}", "--uarch-dir", "{intel}", "--out-dir", "o"], 1,
         "no readable VTune microarchitecture grid"),
        (["hw", "--mapping", "{study}", "--uarch-dir", "{uarch}", "--trace-dir", "{intel}", "--out-dir", "o"], 1,
         "no trace files"),
    ],
)
def test_errors_are_one_line(args, code, text, tmp_path, monkeypatch, reference_dir, uarch_dir, intel_dir, amd_dir):
    bad = tmp_path / "bad.json"
    bad.write_text('{"op_to_func": {"Loader": "decode_mcu|libjpeg.so.9"}}')
    subst = {"{uarch}": str(uarch_dir), "{intel}": str(intel_dir), "{amd}": str(amd_dir), "{bad_mapping}": str(bad),
             "{study}": str(reference_dir / "mapping_funcs.intel.json")}
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, [subst.get(a, a) for a in args])
    assert res.exit_code == code, res.output
    assert text in res.output
    assert "Traceback" not in res.output
    if code == 1:
        errors = [ln for ln in res.output.splitlines() if ln.startswith("lotus: error:")]
        assert len(errors) == 1


@pytest.mark.timeout(120)
def test_hw_writes_tables_and_figures(reference_dir, uarch_dir, tmp_path):
    out = tmp_path / "hw"
    res = _run("hw", "--mapping", str(reference_dir / "mapping_funcs.intel.json"), "--uarch-dir", str(uarch_dir),
               "--trace-dir", str(reference_dir / "traces"), "--out-dir", str(out), "--top", "6")
    assert res.exit_code == 0, res.output
    assert "3 config(s)" in res.output and "pooled over all traced runs" in res.output
    names = {p.name for p in out.iterdir()}
    for stem in ("hw_functions", "hw_ops", "trace_ops"):
        assert {f"{stem}.csv", f"{stem}.parquet"} <= names
    for stem in ("functions_cpu_time_s", "functions_clockticks", "functions_instructions_retired", "functions_topdown",
                 "ops_metrics", "trace_ops"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names, stem
        assert (out / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
    ops = pd.read_parquet(out / "hw_ops.parquet")
    assert ops.equals(pd.read_csv(out / "hw_ops.csv")) or ops.round(9).equals(pd.read_csv(out / "hw_ops.csv").round(9))
    golden = pd.read_csv(reference_dir.parent.parent / "map" / "golden" / "hw_ops_intel_traced.csv")
    assert ops.round(6)[golden.columns].equals(golden)
    functions = pd.read_parquet(out / "hw_functions.parquet")
    assert set(functions["split"]) == {"sole", "trace", "unmapped"}
    # Without a trace, shared functions are reported as shared.
    res = _run("hw", "--mapping", str(reference_dir / "mapping_funcs.intel.json"), "--uarch-dir",
               str(uarch_dir / "b1024_gpu4_dataloader8.csv"), "--out-dir", str(out / "single"))
    assert res.exit_code == 0, res.output
    assert "give --trace-dir to split them" in res.output
    assert "[shared] Loader, RandomResizedCrop, ToTensor" in res.output
