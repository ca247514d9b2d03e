"""lotus viz --window (exact events inside a time or epoch window, both engines) and --overview."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lotus.analysis.window import _busy_per_bucket, overview, parse_window
from lotus.trace.events import load_events
from tests.cli.conftest import run


def slices(path):
    doc = json.loads(path.read_text())
    return sorted((e["name"], e["ts"], e.get("dur")) for e in doc["traceEvents"] if e.get("ph") == "X")


@pytest.mark.parametrize("window", ["0.05:0.12", "e1", "e1:e2", ":0.05"])
def test_window_same_events_both_engines(synth_epochs, tmp_path, monkeypatch, window):
    outs = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        outs[engine] = tmp_path / f"{engine}.json"
        run("viz", "-d", synth_epochs, "--window", window, "-o", outs[engine])
    a, b = slices(outs["memory"]), slices(outs["scan"])
    assert a == b and 0 < len(a) < len(slices_of_all(synth_epochs, tmp_path, monkeypatch))


def slices_of_all(run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    run("viz", "-d", run_dir, "-o", tmp_path / "all.json")
    return slices(tmp_path / "all.json")


def test_window_keeps_exactly_the_overlapping_events(synth_epochs):
    ev = load_events(synth_epochs)
    t0, t1 = parse_window("0.05:0.12", ev)
    assert t0 == int(ev["start_ns"].min()) + 50_000_000 and t1 - t0 == 70_000_000
    e1 = parse_window("e1", ev)
    sel = ev[ev["epoch"] == 1]
    assert e1 == (int(sel["start_ns"].min()), int((sel["start_ns"] + sel["dur_ns"]).max()))


@pytest.mark.parametrize("window", ["1000:1001", "e9", "5:2", "abc"])
def test_window_outside_the_run_one_line_exit_2(synth_epochs, tmp_path, window):
    r = run("viz", "-d", synth_epochs, "--window", window, "-o", tmp_path / "w.json", ok=False)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "w.json").exists()


def test_overview_counters(synth_epochs, tmp_path):
    out = tmp_path / "ov.json"
    r = run("viz", "-d", synth_epochs, "--overview", "--bucket", "0.01", "-o", out)
    assert "overview" in r.output
    doc = json.loads(out.read_text())
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert {"r0/w0", "r0/w1", "r0 loop wait"} <= names
    assert all(0 <= e["args"]["share"] <= 1.0001 for e in counters)


def test_busy_per_bucket_exact():
    s = np.array([0, 5, 25], np.int64)
    e = np.array([5, 12, 58], np.int64)  # the last spans buckets 2..5 of 10
    got = _busy_per_bucket(s, e, 10)
    assert got.tolist() == [10, 2, 5, 10, 10, 8]


def test_overview_total_equals_busy_time(synth_epochs):
    from lotus.analysis.runs import load_config
    from lotus.analysis.stats import prepared

    cfg = load_config(synth_epochs)
    t = overview(cfg.batches, 7_000_000)
    busy = t[t["track"].str.startswith("r0/w")]["share"].sum() * 7_000_000
    assert busy == pytest.approx(float(prepared(cfg.batches)["prep_dur_ns"].sum()), rel=1e-9)


def test_overview_of_the_columns_it_reads_is_the_overview(straggler_run):
    """`lotus viz --overview` asks a scanned run for OVERVIEW_COLUMNS only: the same counters."""
    from lotus.analysis.runs import load_config
    from lotus.analysis.window import OVERVIEW_COLUMNS

    lean = load_config(straggler_run, engine="scan").batches_of(OVERVIEW_COLUMNS)
    assert list(lean.columns) == OVERVIEW_COLUMNS
    want = overview(load_config(straggler_run).batches, 5_000_000)
    assert len(want) and overview(lean, 5_000_000).equals(want)
