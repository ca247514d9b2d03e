"""The one probe protocol: a probe ends once its steady rate is known to +-precision, or at its caps."""

from __future__ import annotations

import json
import sys

import pytest

from lotus.launch import LaunchOptions, launch
from lotus.launch.runner import LaunchError
from tests.launch.test_run import TRAIN, lotus_run


@pytest.mark.timeout(240)
def test_a_probe_ends_when_its_interval_is_narrow_enough(tmp_path):
    # 4 samples x 2 ms per batch, no workers: a steady pace, known to +-5% after a few dozen batches
    r = lotus_run("-o", tmp_path / "t", "--steps", 3000, "--precision", 0.05, "--", sys.executable, TRAIN,
                  "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002, "--out", tmp_path / "i.json")
    assert r.returncode == 0, r.stderr
    run = json.loads((tmp_path / "t" / "lotus-run.json").read_text())
    assert run["stopped_by"] == "precision"
    done = json.loads((tmp_path / "i.json").read_text())["batches"]
    assert 17 <= done < 3000
    assert "95% CI" in r.stderr and "ended: interval within --precision" in r.stderr
    probe = launch([sys.executable, TRAIN, "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002],
                   LaunchOptions(trace_dir=tmp_path / "p", steps=3000, precision=0.05, capture=True))
    assert probe.ok and probe.stopped_by == "precision"
    lo, hi = probe.ci95
    assert lo <= probe.samples_per_s <= hi and (hi - probe.samples_per_s) / probe.samples_per_s <= 0.05
    # the rate is the job's pace: 4 samples per ~2.1-3 ms x 4 (sleep granularity + the loop)
    assert 4 / (4 * 0.0035) < probe.samples_per_s < 4 / (4 * 0.002)


@pytest.mark.timeout(240)
def test_caps_end_a_probe_and_say_which(tmp_path):
    p = launch([sys.executable, TRAIN, "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002],
               LaunchOptions(trace_dir=tmp_path / "s", steps=25, precision=0.0001, capture=True))
    assert p.ok and p.stopped_by == "steps" and p.summary()["batches"] == 25
    p = launch([sys.executable, TRAIN, "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002],
               LaunchOptions(trace_dir=tmp_path / "m", steps=100000, precision=0.0001, max_seconds=1.0,
                             capture=True))
    assert p.ok and p.stopped_by == "time" and p.wall_s < 60
    assert p.summary()["window_s"] == pytest.approx(1.0, abs=0.3)


@pytest.mark.timeout(240)
def test_a_cap_that_ends_a_probe_before_its_interval_says_so(tmp_path):
    r = lotus_run("-o", tmp_path / "t", "--steps", 25, "--precision", 0.0001, "--", sys.executable, TRAIN,
                  "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002)
    assert r.returncode == 0, r.stderr
    assert "ended: --steps, before the interval reached +-0.01% (it is +-" in r.stderr
    assert "note: " in r.stderr and "before +-3%" not in r.stderr.split("ended:")[1].splitlines()[0]


def test_ended_words_why_a_probe_ended():
    from lotus.commands.run import _ended

    assert _ended("precision", 100, 0.02, 0.03) == "; ended: interval within --precision"
    assert _ended("steps", 100, 0.079, None) == "; ended: --steps, before the interval reached +-3% (it is +-7.9%)"
    assert _ended("time", 100, 0.079, 0.1) == "; ended: --max-seconds"
    assert _ended("steps", 100, None, None) == "; ended: --steps, before the rate had an interval"
    assert _ended(None, 100, 0.01, None) == "; ended: the job ended before --steps"
    assert _ended(None, None, 0.2, None) == ""


def test_bad_probe_options_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(LaunchError, match="--steps"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, precision=0.03))
    with pytest.raises(LaunchError, match="between 0 and 1"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, steps=5, precision=2.0))
    r = lotus_run("-o", tmp_path / "x", "--precision", 0.03, "--", sys.executable, TRAIN)
    assert r.returncode == 2 and "--steps" in r.stderr
