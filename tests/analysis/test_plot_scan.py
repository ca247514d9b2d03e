"""Issue 17: ``lotus plot`` on a scanned run (no per-op events in memory) draws the same data as the
in-memory path: every plotdata frame equal, chunks forced small, op samples picked from the files."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from lotus.analysis import plotdata
from lotus.analysis.runs import load_configs
from lotus.cli import cli
from lotus.trace import chunks, events
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.trace.outcome_run import write_outcome_run
from tests.trace.test_scan import REAL, native_from_events


@pytest.mark.parametrize("pop", [7, 9_000, 20_000, 300_000, 2_000_000])
def test_choice_takes_the_indices_of_its_length(pop):
    """``Generator.choice(d, k, replace=False)`` is ``d.take(choice(len(d), k, replace=False))``, the
    generator left in the same state (both of numpy's methods: tail shuffle and Floyd's)."""
    d = np.random.default_rng(1).integers(0, 10**9, pop)
    k = min(pop, 20_000)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(2):
        np.testing.assert_array_equal(a.choice(d, k, replace=False), d[b.choice(pop, k, replace=False)])
    assert a.bit_generator.state == b.bit_generator.state


def _frames(configs, max_per_op):
    ev = [(c.name, c.events) for c in configs]
    ba = [(c.name, c.batches) for c in configs]
    out = {"pre": plotdata.preprocessing_frame(ba), "pre_ro": plotdata.preprocessing_frame(ba, remove_outliers=True),
           "ops": plotdata.op_frame(ev, max_per_op=max_per_op), "ops_seed": plotdata.op_frame(ev, seed=3),
           "cpu": plotdata.op_seconds_frame(ev)}
    for c in configs:
        out |= {f"wait_{c.name}": plotdata.wait_frame(c.batches),
                f"wait_d_{c.name}": plotdata.wait_frame(c.batches, sort="duration"),
                f"delay_{c.name}": plotdata.delay_frame(c.batches), f"tl_{c.name}": plotdata.timeline_frame(c.batches)}
    return out


def _same_frames(data_dir, monkeypatch, max_per_op=5, chunk=7, derived=False):
    """``derived``: format-2 spans are derived per chunk (a sample split from its op records by a chunk
    boundary gets another span), so both engines read chunks of the same size."""
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    with monkeypatch.context() as m:
        if derived:
            m.setattr(events, "_CHUNK_RECORDS", chunk)
        mem = load_configs(data_dir, engine="auto")
    want = _frames(mem, max_per_op)
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    with monkeypatch.context() as m:
        m.setattr(chunks, "CHUNK_RECORDS", chunk)  # ops of one batch split over chunks
        got_configs = load_configs(data_dir, engine="auto")
        assert all("op_engine" in c.events.attrs for c in got_configs)
        got = _frames(got_configs, max_per_op)
    assert want.keys() == got.keys()
    for k in want:
        pd.testing.assert_frame_equal(want[k], got[k], obj=k)
    assert len(want["ops"]) and (want["ops"]["op"].value_counts() == max_per_op).any()  # sampled
    return want


@pytest.mark.parametrize("fixture", ["synth_native", "synth_epochs", "straggler_run", "ddp_run", "real_run"])
def test_frames_equal_on_fixtures(fixture, request, monkeypatch):
    _same_frames(request.getfixturevalue(fixture), monkeypatch)


def test_frames_equal_failed_and_exhausted(tmp_path, monkeypatch):
    for legacy in (False, True):
        run = write_outcome_run(tmp_path / f"o{legacy}", legacy=legacy)
        want = _same_frames(run, monkeypatch, max_per_op=1)
        assert (want["cpu"]["cpu_s"] > 0).all()


def test_frames_equal_several_configs(tmp_path, synth_native, straggler_run, monkeypatch):
    """One generator across configs: the second config's sample depends on the first's counts."""
    shutil.copytree(synth_native, tmp_path / "a")
    shutil.copytree(straggler_run, tmp_path / "b")
    write_outcome_run(tmp_path / "c")
    want = _same_frames(tmp_path, monkeypatch)
    assert set(want["ops"]["config"]) == {"a", "b", "c"}


def test_frames_equal_study_trace(tmp_path, monkeypatch):
    """A study trace (4,606 calls per op) rewritten as lotus files."""
    run = native_from_events(load_events(REAL / "b512_gpu1"), tmp_path / "real")
    _same_frames(run, monkeypatch, max_per_op=1000, chunk=4099)


def test_frames_equal_default_sample(tmp_path, monkeypatch):
    """More than 20,000 calls of its ops: the figure's default sample size (numpy's tail shuffle)."""
    write_native(tmp_path / "big", PipelineSpec(n_batches=700, batch_size=32, n_workers=2, seed=7))
    want = _same_frames(tmp_path / "big", monkeypatch, max_per_op=20_000, chunk=4099)
    assert (want["ops_seed"]["op"].value_counts() == 20_000).any()


@pytest.mark.detail_budget
@pytest.mark.timeout(180)
def test_frames_equal_detail_budget(tmp_path, monkeypatch):
    """Per-op detail for a share of the batches (format 2, derived spans): the same scaled totals."""
    from tests.dataloader.test_detail_budget import write_budget_run

    run = write_budget_run(tmp_path / "budget")
    want = _same_frames(run, monkeypatch, max_per_op=3)  # derived spans do not depend on the chunks
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    assert 0 < load_configs(run, engine="auto")[0].batches["detail"].mean() < 1
    assert set(want["cpu"]["op"]) >= {"load", "collate"}


def test_cli_same_files(tmp_path, synth_epochs, monkeypatch):
    write_outcome_run(tmp_path / "runs" / "o")
    shutil.copytree(synth_epochs, tmp_path / "runs" / "s")
    listed = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        out = tmp_path / engine
        r = CliRunner().invoke(cli, ["plot", "-d", str(tmp_path / "runs"), "-o", str(out), "--format", "png"])
        assert r.exit_code == 0, r.output
        listed[engine] = sorted(p.name for p in out.iterdir())
        assert f"{len(listed[engine])} files in" in r.output
    assert listed["memory"] == listed["scan"] and "op_times.png" in listed["scan"]
