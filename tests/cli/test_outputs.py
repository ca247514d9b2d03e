"""`lotus viz|plot|report|diff|export|info` through click."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from tests.cli.conftest import check_golden, run


def test_viz_fine_coarse_gz(synth_native, tmp_path):
    out = run("viz", "-d", synth_native, "--out", tmp_path / "t.json").output
    assert "12 batch flows" in out and "ui.perfetto.dev" in out
    fine = json.loads((tmp_path / "t.json").read_text())
    run("viz", "-d", synth_native, "-o", tmp_path / "c.json.gz", "--coarse")
    with gzip.open(tmp_path / "c.json.gz", "rt") as f:
        coarse = json.load(f)
    assert len(coarse["traceEvents"]) < len(fine["traceEvents"])


@pytest.mark.timeout(60)
def test_viz_merges_the_profiler_trace_found_in_the_run(real_run, tmp_path):
    out = run("viz", "-d", real_run, "-o", tmp_path / "m.json").output
    assert "merged into" in out and "profile.pt.trace.json" in out
    doc = json.loads((tmp_path / "m.json").read_text())
    assert any(str(e.get("name", "")).startswith("train_step_") for e in doc["traceEvents"])
    out = run("viz", "-d", real_run, "-o", tmp_path / "n.json", "--no-merge").output
    assert "merged" not in out


def test_viz_with_explicit_merge(synth_native, tmp_path):
    k = tmp_path / "k.json"
    k.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}],
                             "baseTimeNanoseconds": 1_700_000_000_000_000_000}))
    run("viz", "-d", synth_native, "-o", tmp_path / "m.json", "--merge", k)
    doc = json.loads((tmp_path / "m.json").read_text())
    assert any(e.get("name") == "x" for e in doc["traceEvents"])


def test_viz_needs_one_run(reference_dir, tmp_path):
    res = run("viz", "-d", reference_dir / "traces", "-o", tmp_path / "t.json", ok=False)
    assert res.exit_code == 1 and "holds 3 runs" in res.stderr and res.stderr.count("\n") == 1


def test_plot(synth_native, tmp_path):
    out = run("plot", "-d", synth_native, "--out-dir", tmp_path, "--format", "png").output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["delay_native.png", "op_cpu_seconds.png", "op_times.png", "preprocessing_box.png",
                     "timeline_native.png", "wait_native.png"]
    assert "6 files" in out


def test_report(synth_native, reference_dir, tmp_path):
    run("report", "-d", synth_native, "--out", tmp_path / "r" / "report.html")
    html = (tmp_path / "r" / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html and "http" not in html.split(
        "</style>")[0]
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["configs"]["native"]["verdict"]["class"] in ("fine", "input-bound", "severely input-bound")
    run("report", "-d", reference_dir / "traces", "-o", tmp_path / "ref.html", "--no-figures")
    assert "<img" not in (tmp_path / "ref.html").read_text()


def test_diff(reference_dir):
    t = reference_dir / "traces"
    out = run("diff", t / "b128_gpu4", t / "b512_gpu1").output
    assert "collate" in out and "slower:" in out
    doc = json.loads(run("diff", t / "b128_gpu4", t / "b512_gpu1", "--json").stdout)
    assert doc["ops_ms"]["collate"]["mean"]["change_pct"] > 200
    assert run("diff", t / "b128_gpu4", ok=False).exit_code == 2


def test_export(reference_dir, tmp_path):
    run("export", "-d", reference_dir / "traces", "--out", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b128_gpu4", "b256_gpu2", "b512_gpu1"]
    ev = pd.read_parquet(tmp_path / "b128_gpu4" / "events.parquet")
    assert len(ev) == 10018 and str(ev["name"].dtype) == "category"


def test_info_text_and_json(reference_dir):
    out = run("info", "-d", reference_dir / "traces" / "b128_gpu4").output
    check_golden("info_reference.txt", out.replace(str(reference_dir), "REF"))
    doc = json.loads(run("info", "-d", reference_dir / "traces", "--json").stdout)
    b = doc["runs"]["b512_gpu1"]
    assert [f["role"] for f in b["files"]] == ["main", "worker"]
    assert b["event_counts"]["fetch"] == 8 and b["batches"]["consumed"] == 8


def test_info_real_run(real_run):
    out = run("info", "-d", real_run).output
    assert "num_workers=2" in out and "clean" in out and "profile.pt.trace.json" in out
