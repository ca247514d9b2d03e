"""The one steady-state rate estimator (lotus.analysis.steady): window, start-up, interval coverage."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.analysis.runspread import combine
from lotus.analysis.steady import MIN_BLOCKS, steady_rate, t975

MS = 1_000_000


def _handoffs(gaps_ms, ramp: int) -> np.ndarray:
    """Ramp batches handed out 1 ms apart, then one per gap."""
    t = list(np.arange(ramp) * 1.0)
    for g in gaps_ms:
        t.append(t[-1] + g)
    return (np.asarray(t) * MS).astype(np.int64)


def test_constant_pace_gives_the_pace_with_a_tight_interval():
    t = _handoffs([10.0] * 200, ramp=8)
    r = steady_rate(t, np.full(len(t), 32.0), ramp=8, workers=4)
    assert r.samples_per_s == pytest.approx(3200.0)
    lo, hi = r.ci95
    assert lo == pytest.approx(3200.0) and hi == pytest.approx(3200.0)
    assert r.batches == 200 and r.ramp_batches == 8 and r.startup_batches == 0
    assert r.blocks >= MIN_BLOCKS and r.rel_halfwidth == pytest.approx(0.0)


def test_the_interval_covers_the_true_rate_about_95_percent_of_the_time():
    # 4 workers deliver in bursts: per round one 40 ms gap and three short ones, jittered (lognormal)
    rng = np.random.default_rng(7)
    true_rate = 4 / 0.040  # batches/s
    covered, widths = 0, []
    trials = 300
    for _ in range(trials):
        base = np.tile([37.0, 1.0, 1.0, 1.0], 60)
        gaps = base * rng.lognormal(0.0, 0.5, len(base)) / np.exp(0.5 ** 2 / 2)  # mean gap = base's
        r = steady_rate(_handoffs(gaps, ramp=8), ramp=8, workers=4)
        lo, hi = r.ci95
        covered += lo <= true_rate <= hi
        widths.append(r.rel_halfwidth)
    assert 0.88 <= covered / trials <= 0.99, covered / trials
    assert 0.01 < float(np.median(widths)) < 0.2


def test_short_windows_have_no_interval_and_say_why():
    r = steady_rate(_handoffs([10.0, 10.0], ramp=4), ramp=4, workers=2)
    assert r.samples_per_s == pytest.approx(100.0) and r.ci95 is None and "too few" in r.note
    r = steady_rate(_handoffs([], ramp=4), ramp=4, workers=2)  # the ramp only: a rate, flagged as untrustworthy
    assert r.samples_per_s is not None and r.ci95 is None and "too short to trust" in r.note
    r = steady_rate(_handoffs([], ramp=1), ramp=4, workers=2)  # one batch: no rate
    assert r.samples_per_s is None and "none after the ramp" in r.note
    r = steady_rate(np.array([], dtype=np.int64), ramp=1)
    assert r.samples_per_s is None and r.note == "no batch was handed out"


def test_a_first_slow_step_after_the_ramp_is_start_up():
    # num_workers=0: a first CUDA step of 800 ms, then 20 ms steps
    t = _handoffs([800.0] + [20.0] * 100, ramp=1)
    r = steady_rate(t, ramp=1, workers=0)
    assert r.startup_batches == 1
    assert r.samples_per_s == pytest.approx(50.0)


def test_epoch_starts_inside_the_window_count_and_segments_do_not():
    gaps = ([10.0] * 30 + [300.0]) * 3 + [10.0] * 30  # 3 epoch starts costing 300 ms
    t = _handoffs(gaps, ramp=1)
    r = steady_rate(t, ramp=1)
    assert r.samples_per_s == pytest.approx(len(gaps) / (sum(gaps) / 1e3))
    seg = np.repeat(np.arange(4), 31)[: len(t)]
    r2 = steady_rate(t, ramp=1, segments=seg)  # replay: each epoch its own stretch, the gaps between left out
    assert r2.samples_per_s == pytest.approx(100.0, rel=1e-6)


def test_ranks_add_up_and_their_intervals_in_quadrature():
    a = steady_rate(_handoffs(np.tile([5.0, 15.0], 50), ramp=2), ramp=2, workers=2)
    total, ci = combine([a, a])
    assert total == pytest.approx(2 * a.samples_per_s)
    hw = (a.ci95[1] - a.ci95[0]) / 2
    assert (ci[1] - ci[0]) / 2 == pytest.approx(np.sqrt(2) * hw)
    assert combine([]) == (None, None)


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706) and t975(30) == pytest.approx(2.042) and t975(500) == 1.96


def test_short_epochs_make_whole_epoch_blocks():
    # epochs of 12 batches with a 300 ms restart each: blocks of 20 batches would hold 1 or 2 restarts (wide
    # interval); blocks of whole epochs each hold one, so a steady job's interval is tight
    rng = np.random.default_rng(3)
    gaps, epochs = [], []
    for e in range(40):
        gaps += [300.0 + rng.normal(0, 5), *(10.0 + rng.normal(0, 0.5, 11))]
        epochs += [e] * 12
    t = _handoffs(gaps, ramp=1)
    ep = np.array([0, *epochs])
    by_epoch = steady_rate(t, ramp=8, workers=4, epochs=ep)
    plain = steady_rate(t, ramp=8, workers=4)
    assert by_epoch.samples_per_s == pytest.approx(plain.samples_per_s)
    assert by_epoch.rel_halfwidth < 0.03 < plain.rel_halfwidth


def test_an_interval_wider_than_the_target_is_never_silent():
    from lotus.analysis.steady import ended_by, interval_note

    rng = np.random.default_rng(3)
    wide = steady_rate(_handoffs(rng.lognormal(2.3, 1.0, 40), ramp=4), ramp=4, workers=2)
    assert wide.rel_halfwidth > 0.03
    assert (f"within-run interval +-{wide.rel_halfwidth:.1%}: the job ended (or the cap stopped it) before +-3%"
            in wide.note)
    # a reported rate's interval adds the run-to-run spread; the note's figure stays the run's own interval
    from lotus.analysis.runspread import with_run_spread

    shown = with_run_spread(wide, 0.05, 20)
    assert shown.rel_halfwidth > wide.rel_halfwidth and shown.note == wide.note
    assert shown.within_ci95 == wide.ci95 and f"+-{wide.rel_halfwidth:.1%}" in shown.note
    tight = steady_rate(_handoffs([10.0] * 200, ramp=8), ramp=8, workers=4)
    assert tight.note is None
    assert interval_note(0.288) == "within-run interval +-28.8%: the job ended (or the cap stopped it) before +-3%"
    assert interval_note(0.02) is None and interval_note(None) is None
    assert [ended_by(s) for s in ("precision", "steps", "time", None)] == ["precision", "steps cap", "time cap",
                                                                          "job ended"]
    assert ended_by("steps", 7) == "failed"


def test_an_epoch_restart_right_after_the_ramp_is_not_start_up():
    # 32 workers x prefetch 2 = a whole 64-batch epoch in the ramp: the next epoch's first hand-off comes after
    # its restart (2.8 s), a long run's cost, not a first slow step; without epochs it cannot be told apart
    gaps = [2800.0] + [80.0] * 63 + [2800.0] + [80.0] * 63
    t = _handoffs(gaps, ramp=64)
    ep = np.repeat(np.arange(3), 64)[:len(t)]
    n = np.full(len(t), 128.0)
    whole = steady_rate(t, n, ramp=64, workers=32, epochs=ep)
    assert whole.startup_batches == 0
    assert whole.samples_per_s == pytest.approx(128 * 128 / ((2 * 2800 + 126 * 80) / 1e3))
    blind = steady_rate(t, n, ramp=64, workers=32)
    assert blind.startup_batches == 1 and blind.samples_per_s > whole.samples_per_s


def test_a_runs_summary_gives_its_own_interval_beside_the_shown_one(tmp_path):
    """summarize_run (what `lotus run` prints a probe's end from): the shown interval adds the run-to-run spread;
    ``within_rel_halfwidth`` is the run's own, the figure of the note and of the stop rule."""
    from lotus.analysis.throughput import summarize_run
    from tests.invariants.shapes import Shape, write_shape

    write_shape(tmp_path / "t", Shape(epochs=(40,), prep_us=(2_000, 9_000, 500, 15_000), workers=2))
    s = summarize_run(tmp_path / "t")
    assert 0.03 < s["within_rel_halfwidth"] < s["rel_halfwidth"] and s["run_spread"] > 0
    assert f"within-run interval +-{s['within_rel_halfwidth']:.1%}:" in s["note"]
