"""Probes of one job in one process (lotus.launch.series + lotus.dataloader.series): real jobs, real processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lotus.launch import LaunchOptions
from lotus.launch.series import Series
from lotus.query import load_batches
from tests.launch.test_run import TRAIN


def _loader(trace_dir) -> dict:
    from lotus.model import load_run

    return next(iter(load_run(trace_dir).loaders.values()))


def _pids(trace_dir) -> set[int]:
    return {json.loads(p.read_text())["pid"] for p in trace_dir.glob("lotus-steps-reached-*")}


@pytest.mark.timeout(240)
def test_each_probe_of_a_series_has_its_settings_its_trace_and_the_same_process(tmp_path):
    cmd = [sys.executable, TRAIN, "--workers", 2, "--persistent", "--epochs", 1000, "--n", 256, "--sleep", 0.002,
           "--out", tmp_path / "info.json"]
    series = Series([str(c) for c in cmd], tmp_path / "ctl")
    asked = [(None, {}), (0, {}), (3, {"prefetch_factor": 4}), (1, {"pin_memory": False})]
    probes = []
    for i, (workers, args) in enumerate(asked):
        probes.append(series.probe(LaunchOptions(trace_dir=tmp_path / f"p{i}", steps=40, workers=workers,
                                                 loader_args=args)))
        assert series.alive
    end = series.close()
    assert end is not None and end.exit_code == 0 and not series.alive
    assert all(p.ok and p.steps_reached and p.stopped_by == "steps" for p in probes)
    assert len(set().union(*(_pids(p.trace_dir) for p in probes))) == 1  # one process
    # each probe's loader ran with what it forced, the script's own settings for the rest
    want = [(2, 3, True), (0, None, False), (3, 4, True), (1, 3, True)]
    for p, (workers, prefetch, persistent) in zip(probes, want, strict=True):
        desc = _loader(p.trace_dir)
        assert (desc["num_workers"], desc["prefetch_factor"], desc["persistent_workers"]) == (workers, prefetch,
                                                                                            persistent)
        b = load_batches(p.trace_dir)
        assert b["consumed_ns"].notna().sum() >= 40  # the probe's batches, each handed to the loop
        assert p.samples_per_s and p.samples_per_s > 0
    assert _loader(probes[1].trace_dir)["overrides"] == {"num_workers": 0}
    assert _loader(probes[1].trace_dir)["requested"] == {"num_workers": 2}
    # the job itself went on through every switch and ended by its own code path (its finally block ran)
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["batches"] >= 4 * 40
    # no worker of any probe is left
    worker_pids = {int(f.name.split("-p")[-1].split(".")[0]) for p in probes for f in p.trace_dir.glob("*-w*")}
    assert worker_pids and not any(_alive(pid) for pid in worker_pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended


@pytest.mark.timeout(240)
def test_a_series_whose_job_ends_gives_that_probe_and_ends(tmp_path):
    # 64 samples, 4 per batch: the job's one epoch is 16 batches; a probe of the series starts a new pass of the
    # sampler, whose 16 batches end the job before the second probe's 40 steps
    cmd = [sys.executable, TRAIN, "--workers", 0, "--epochs", 1, "--n", 64]
    series = Series(cmd, tmp_path / "ctl")
    first = series.probe(LaunchOptions(trace_dir=tmp_path / "p0", steps=8))
    assert first.steps_reached and series.alive
    second = series.probe(LaunchOptions(trace_dir=tmp_path / "p1", steps=40, workers=1))
    assert not second.steps_reached and second.exit_code == 0 and not series.alive
    assert load_batches(second.trace_dir)["consumed_ns"].notna().sum() == 16  # the new pass, whole
    with pytest.raises(RuntimeError, match="ended"):
        series.probe(LaunchOptions(trace_dir=tmp_path / "p2", steps=8))
    assert series.close().exit_code == 0


@pytest.mark.timeout(240)
def test_a_job_that_fails_in_a_series_probe_gives_its_exit_code(tmp_path):
    cmd = [sys.executable, TRAIN, "--workers", 0, "--epochs", 100, "--n", 64, "--crash-at", 30]
    series = Series(cmd, tmp_path / "ctl")
    assert series.probe(LaunchOptions(trace_dir=tmp_path / "p0", steps=10)).ok
    failed = series.probe(LaunchOptions(trace_dir=tmp_path / "p1", steps=40))
    assert failed.exit_code == 1 and not failed.steps_reached
    assert "the job crashed" in failed.stderr_tail()


def test_settings_of_a_series_probe_are_the_script_s_with_the_forced_over_them():
    import torch

    from lotus.dataloader.series import apply_settings

    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=2, persistent_workers=True,
                                         prefetch_factor=3)
    assert apply_settings(loader, {"num_workers": 0})["persistent_workers"] is False
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    apply_settings(loader, {"num_workers": 1, "pin_memory": False})
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, True)
    assert loader._lotus_requested == {"num_workers": 2, "pin_memory": False}


@pytest.mark.timeout(240)
def test_another_loader_of_the_job_does_not_end_a_later_probe(tmp_path):
    # the validation loader (4 batches every 10 steps) reaches 40 batches during the second probe, while it still
    # traces into the first probe's directory: it goes on untraced, and the training loader's probes go on
    cmd = [sys.executable, str(Path(TRAIN).parent / "two_loaders.py")]
    series = Series(cmd, tmp_path / "ctl")
    probes = [series.probe(LaunchOptions(trace_dir=tmp_path / f"p{i}", steps=40, workers=w))
              for i, w in enumerate([None, 2, 0])]
    assert all(p.steps_reached and p.ok for p in probes) and series.alive
    assert series.close().exit_code == 0
    assert "tracing of this DataLoader stopped (probe series" in probes[0].stderr_tail()
    assert [_loader(p.trace_dir)["num_workers"] for p in probes] == [1, 2, 0]
