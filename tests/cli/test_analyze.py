"""`lotus analyze stats|wait|verdict` through click, on real and synthetic traces."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.cli.conftest import check_golden, run


def test_help_lists_subcommands():
    out = run("--help").output
    for name in ("analyze", "viz", "plot", "report", "diff", "export", "info"):
        assert name in out
    out = run("analyze", "--help").output
    assert "stats" in out and "wait" in out and "verdict" in out
    for sub in ("stats", "wait", "verdict"):
        assert "--data-dir" in run("analyze", sub, "--help").output


def test_stats_text_on_the_reference_logs(reference_dir):
    out = run("analyze", "stats", "--data-dir", reference_dir / "traces").output
    assert out.index("b128_gpu4") < out.index("b256_gpu2") < out.index("b512_gpu1")
    for op in ("batch preprocessing", "load", "RandomResizedCrop", "Normalize", "collate"):
        assert op in out


def test_stats_json_golden(reference_dir):
    out = run("analyze", "stats", "-d", reference_dir / "traces", "--json").output
    doc = json.loads(out)
    assert set(doc["configs"]) == {"b128_gpu4", "b256_gpu2", "b512_gpu1"}
    b = doc["configs"]["b128_gpu4"]
    assert set(b["batch_preprocessing_ms"]) == {"count", "sum", "mean", "std", "std_pct", "min", "max", "median",
                                                "p25", "p75", "iqr", "p90", "p99"}
    assert list(b["ops_ms"]) == ["load", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize",
                                 "transform", "collate"]
    check_golden("stats_reference.json", out)


def test_stats_output_files_and_outliers(synth_native, tmp_path):
    run("analyze", "stats", "-d", synth_native, "--output", tmp_path / "s.csv", "--remove-outliers")
    t = pd.read_csv(tmp_path / "s.csv")
    assert t.loc[0, "name"] == "batch preprocessing" and t.loc[0, "count"] == 12
    run("analyze", "stats", "-d", synth_native, "-o", tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["configs"]["native"]["ops_ms"]["load"]["count"] == 48


def test_wait_text_golden(straggler_run):
    out = run("analyze", "wait", "-d", straggler_run, "--sort", "duration", "--top", "5").output
    assert "head-of-line blocking" in out and "in_order=False would save" in out
    check_golden("wait_straggler.txt", out.replace(straggler_run.name, "RUN"))


def test_wait_json_and_figures(synth_native, tmp_path):
    res = run("analyze", "wait", "-d", synth_native, "--json", "--fig-dir", tmp_path)
    doc = json.loads(res.stdout)
    w = doc["configs"]["native"]
    assert w["known"] and len(w["batches_detail"]) == 12
    assert {p.name for p in tmp_path.iterdir()} == {"wait_native.png", "wait_native.svg", "delay_native.png",
                                                   "delay_native.svg"}


def test_wait_unknown_for_old_logs(reference_dir):
    out = run("analyze", "wait", "-d", reference_dir / "traces" / "b128_gpu4").output
    assert "wait unknown" in out and "SBatchWait" in out


def test_verdict_text_golden_and_gate(straggler_run):
    res = run("analyze", "verdict", "-d", straggler_run)
    assert "SEVERELY INPUT-BOUND" in res.output and "in_order=False" in res.output
    check_golden("verdict_straggler.txt", res.output.replace(straggler_run.name, "RUN"))
    gated = run("analyze", "verdict", "-d", straggler_run, "--fail-if-input-bound", "0.05", ok=False)
    assert gated.exit_code == 3
    assert "input-bound above 5.0%" in gated.stderr
    assert run("analyze", "verdict", "-d", straggler_run, "--fail-if-input-bound", "0.9").exit_code == 0


def test_stats_per_rank(ddp_run):
    out = run("analyze", "stats", "-d", ddp_run, "--per-rank").output
    assert "rank 0" in out and "rank 1" in out
    doc = json.loads(run("analyze", "stats", "-d", ddp_run, "--per-rank", "--json").stdout)
    per = doc["configs"]["ddp"]["per_rank"]
    assert per["0"]["batch_preprocessing_ms"]["count"] == per["1"]["batch_preprocessing_ms"]["count"] == 8


def test_verdict_json_per_rank(ddp_run):
    doc = json.loads(run("analyze", "verdict", "-d", ddp_run, "--json", "--fail-if-input-bound", "1").stdout)
    v = doc["configs"]["ddp"]
    assert set(v["per_rank"]) == {"0", "1"} and doc["failed"] == []
    assert "rank 1" in run("analyze", "verdict", "-d", ddp_run, "--per-rank").output


def test_verdict_unknown_does_not_gate(reference_dir):
    res = run("analyze", "verdict", "-d", reference_dir / "traces", "--fail-if-input-bound", "0.01")
    assert res.output.count("UNKNOWN") == 3


@pytest.mark.parametrize("args", [["analyze", "stats"], ["analyze", "wait", "-d", ".", "--sort", "size"],
                                  ["analyze", "verdict", "-d", ".", "--fail-if-input-bound", "2"],
                                  ["analyze", "nope"]])
def test_usage_errors_exit_2(args):
    assert run(*args, ok=False).exit_code == 2
