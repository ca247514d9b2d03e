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
    assert "95% CI" in r.stderr and "ended: within-run interval within --precision" in r.stderr
    probe = launch([sys.executable, TRAIN, "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002],
                   LaunchOptions(trace_dir=tmp_path / "p", steps=3000, precision=0.05, capture=True))
    assert probe.ok and probe.stopped_by == "precision"
    # the stop rule judged the run's own interval (its marker): within the precision asked
    marker = json.loads(next((tmp_path / "p").glob("lotus-steps-reached-*.json")).read_text())
    assert marker["stopped_by"] == "precision" and 0 < marker["rel_halfwidth"] <= 0.05
    # the reported interval adds the run-to-run spread (docs/intervals.md): at most both in quadrature, with
    # the few degrees of freedom of ~17 batches (CI read +-5.7% once where the stop rule had +-5%)
    from lotus.analysis.runspread import RUN_SPREAD

    lo, hi = probe.ci95
    assert lo <= probe.samples_per_s <= hi
    assert (hi - probe.samples_per_s) / probe.samples_per_s <= 1.25 * (0.05 ** 2 + (1.96 * RUN_SPREAD) ** 2) ** 0.5
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
    assert "ended: --steps, before its within-run interval reached +-0.01% (it is +-" in r.stderr
    assert "note: " in r.stderr and "before +-3%" not in r.stderr.split("ended:")[1].splitlines()[0]


@pytest.mark.timeout(240)
def test_a_probe_shown_below_the_rate_it_must_reach_ends_early(tmp_path):
    # the job runs ~1,100-2,000 samples/s (4 samples per ~2-3.5 ms): asked to reach 50,000 it is shown under it
    # after a few blocks, long before --precision 0.0001 or --steps could end it
    args = [sys.executable, TRAIN, "--workers", 0, "--epochs", 1000, "--n", 64, "--sleep", 0.002]
    p = launch(args, LaunchOptions(trace_dir=tmp_path / "b", steps=3000, precision=0.0001, below=50000.0,
                                   capture=True))
    assert p.ok and p.stopped_by == "below", p.stderr_tail()
    assert p.ci95[1] < 50000 and p.summary()["batches"] < 3000
    run = json.loads((tmp_path / "b" / "lotus-run.json").read_text())
    assert run["below"] == 50000.0
    # a rate it does reach never ends it that way: the cap does
    q = launch(args, LaunchOptions(trace_dir=tmp_path / "a", steps=60, precision=0.0001, below=10.0, capture=True))
    assert q.ok and q.stopped_by == "steps"
    r = lotus_run("-o", tmp_path / "t", "--steps", 3000, "--below", 50000, "--", *args)
    assert r.returncode == 0 and "ended: interval wholly under --below" in r.stderr, r.stderr


def test_stop_rule_below_needs_its_blocks_and_the_whole_interval_under():
    from lotus.dataloader.probe import MIN_BLOCKS_BELOW, MIN_BLOCKS_TO_STOP, StopRule

    def feed(rule, n, gap_ns=10_000_000, workers=2):
        """n hand-offs 10 ms apart (+-1 ms), batch of 1 sample: 100 samples/s; returns the first stop."""
        import random

        rng, t = random.Random(1), 0
        for i in range(1, n + 1):
            t += gap_ns + rng.randint(-1_000_000, 1_000_000)
            why = rule.check(i, (i - 1, t), workers, 2)
            if why:
                return why, i
        return None, n

    why, at = feed(StopRule(precision=None, max_s=None, below=150.0), 400)
    assert why == "below"
    ramp = 2 * 2
    assert ramp + MIN_BLOCKS_BELOW * 2 <= at < ramp + MIN_BLOCKS_TO_STOP * 2 + 16  # before precision's window
    assert StopRule(precision=None, max_s=None, below=150.0).check(0, None, 2, 2) is None
    near = feed(StopRule(precision=None, max_s=None, below=103.0), 400)  # closer: more batches to show it
    assert near[0] == "below" and near[1] > at
    assert feed(StopRule(precision=None, max_s=None, below=90.0), 400)[0] is None  # above it: never "below"
    why, at = feed(StopRule(precision=0.05, max_s=None, below=90.0), 4000)
    assert why == "precision"


def test_the_stop_rule_spends_at_most_1pct_of_the_loop_on_its_estimates(monkeypatch):
    """An estimate every round of 2 workers took 4-8% of a 2-CPU job's CPU (probes read that much low): the next
    periodic estimate waits for ESTIMATE_COST_RATIO times the last one's cost of hand-offs."""
    import itertools

    import numpy as np

    import lotus.analysis.steady as steady
    from lotus.dataloader import probe as P

    calls = []
    real = steady.steady_rate

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(steady, "steady_rate", counted)
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.integers(500_000, 1_500_000, 2001))  # hand-offs ~1 ms apart
    ticks = itertools.count(0, 500_000)  # the clock read before and after an estimate: each costs 0.5 ms
    rule = P.StopRule(precision=1e-9, max_s=None, clock=lambda: next(ticks))
    for i in range(1, 2001):  # without the limit, an estimate every 2 (~990)
        assert rule.check(i, (i - 1, int(t[i])), 2, 2) is None
    gap_ms = P.ESTIMATE_COST_RATIO * 0.5  # 50 ms of hand-offs between estimates
    assert 2000 / gap_ms * 0.8 <= len(calls) <= 2000 / gap_ms + 2
    # a free estimate (a clock that does not move) runs every round, as before
    calls.clear()
    rule = P.StopRule(precision=1e-9, max_s=None, clock=lambda: 0)
    for i in range(1, 201):
        rule.check(i, (i - 1, int(t[i])), 2, 2)
    need = 2 * 2 + max(P.MIN_BLOCKS_TO_STOP * 2, P.MIN_WINDOW)
    assert len(calls) == (200 - need) // 2 + 1


def test_ended_words_why_a_probe_ended():
    from lotus.commands.run import _ended

    assert _ended("precision", 100, 0.02, 0.03) == "; ended: within-run interval within --precision"
    assert _ended("steps", 100, 0.079, None) == ("; ended: --steps, before its within-run interval reached +-3% "
                                                 "(it is +-7.9%)")
    assert _ended("time", 100, 0.079, 0.1) == "; ended: --max-seconds"
    assert _ended("steps", 100, None, None) == "; ended: --steps, before the rate had an interval"
    assert _ended(None, 100, 0.01, None) == "; ended: the job ended before --steps"
    assert _ended(None, None, 0.2, None) == ""
    assert _ended("below", 100, 0.2, None) == "; ended: interval wholly under --below"


def test_bad_probe_options_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(LaunchError, match="--steps"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, precision=0.03))
    with pytest.raises(LaunchError, match="between 0 and 1"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, steps=5, precision=2.0))
    r = lotus_run("-o", tmp_path / "x", "--precision", 0.03, "--", sys.executable, TRAIN)
    assert r.returncode == 2 and "--steps" in r.stderr
    with pytest.raises(LaunchError, match="--steps"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, below=10.0))
    with pytest.raises(LaunchError, match="above 0"):
        launch([sys.executable, TRAIN], LaunchOptions(trace_dir=tmp_path, steps=5, below=-1.0))
    r = lotus_run("-o", tmp_path / "y", "--below", 10, "--", sys.executable, TRAIN)
    assert r.returncode == 2 and "--steps" in r.stderr


def test_below_is_given_in_samples_and_compared_in_batches(monkeypatch):
    from lotus import _env
    from lotus.dataloader.config import stop_rule

    monkeypatch.setenv(_env.STOP_BELOW, "160")
    assert stop_rule(1, 16).below == pytest.approx(10.0)  # the rule times hand-offs: batches/s
    assert stop_rule(1, None) is None  # no batch size (a batch sampler of its own): nothing else asked for
    monkeypatch.setenv(_env.PRECISION, "0.03")
    assert stop_rule(1, None).below is None and stop_rule(1, None).precision == 0.03
    assert stop_rule(2, 16) is None  # several ranks end at --steps
