"""The commands give the same answers on the in-memory and the out-of-core (scan) engine."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.cli.conftest import run

SAME_TEXT = [("analyze", "verdict"), ("analyze", "wait"), ("analyze", "gpu"), ("analyze", "throughput"),
             ("analyze", "ranks"), ("info",)]


def both(monkeypatch, *args):
    out = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        out[engine] = run(*args).output
    return out["memory"], out["scan"]


@pytest.mark.parametrize("cmd", SAME_TEXT)
def test_same_output(cmd, synth_epochs, monkeypatch):
    a, b = both(monkeypatch, *cmd, "-d", synth_epochs)
    assert a == b


@pytest.mark.parametrize("cmd", SAME_TEXT)
def test_commands_take_the_scan_engine_when_told(cmd, synth_epochs, monkeypatch):
    """LOTUS_ENGINE=scan stands for a run over the scan threshold: each of these commands must read it
    with the scan engine (a command left on the memory engine loads every event of a day-long run:
    `analyze throughput` did, 7.6 GiB at 100M events)."""
    from lotus.analysis import runs

    seen = []
    engine_for = runs._engine_for
    monkeypatch.setattr(runs, "_engine_for", lambda run_, engine: seen.append(engine_for(run_, engine)) or seen[-1])
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    run(*cmd, "-d", synth_epochs)
    assert seen and set(seen) == {"scan"}


def test_info_json_same(synth_epochs, straggler_run, monkeypatch):
    for r in (synth_epochs, straggler_run):
        a, b = both(monkeypatch, "info", "-d", r, "--json")
        assert a == b and '"event_counts"' in a


def test_diff_same(synth_epochs, straggler_run, monkeypatch):
    a, b = both(monkeypatch, "diff", synth_epochs, straggler_run)
    assert a == b


def test_export_streams_every_event(synth_epochs, tmp_path, monkeypatch):
    frames = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        run("export", "-d", synth_epochs, "-o", tmp_path / engine)
        (d,) = (tmp_path / engine).iterdir()
        ev = pq.read_table(d / "events.parquet").to_pandas()
        ev = ev.astype({c: str for c in ("name", "cat", "role")})
        frames[engine] = ev.sort_values(list(ev.columns), ignore_index=True)
        assert b"lotus" in pq.read_schema(d / "events.parquet").metadata
    pd.testing.assert_frame_equal(frames["memory"], frames["scan"], check_dtype=False)
