"""A search's control probe (lotus.analysis.runspread.Control): one of its settings measured again at its end,
in a run of its own, tells how far separate runs' pace differs and widens every rate's interval by the spread
the pair shows (issue 24)."""

from __future__ import annotations

import math

import pytest

from lotus.analysis.runspread import RUN_SPREAD, Reading, control_check


@pytest.fixture(autouse=True)
def _default_spread(monkeypatch):
    monkeypatch.delenv("LOTUS_RUN_SPREAD", raising=False)


def test_a_pace_held_within_the_probes_intervals_changes_nothing():
    first = Reading("a", 1000.0, (960.0, 1040.0), 0.03, at_s=0.0)
    again = Reading("a-control", 1020.0, (980.0, 1060.0), 0.03, at_s=300.0)
    c = control_check(first, again, "4 CPUs")
    assert not c.apart and c.pair_rel_sd == 0.0 and c.run_rel_sd == RUN_SPREAD and not c.widens
    assert c.drift == pytest.approx(0.02) and c.seconds_apart == 300.0
    assert c.widen(500.0, [480.0, 520.0]) == [480.0, 520.0]
    assert "no change of the host's pace shown" in c.note() and "300 s later" in c.note()
    assert c.pooled_samples_per_s == 1010.0 and c.pooled_ci95[0] < 1010.0 < c.pooled_ci95[1]


def test_a_pace_that_moved_widens_every_interval_by_the_pairs_spread():
    # within-run half-widths of 3%: se 1.53% each; the pair is 20% apart
    first = Reading("a", 1000.0, (970.0, 1030.0), 0.03)
    again = Reading("a-control", 800.0, (776.0, 824.0), 0.03)
    c = control_check(first, again, "4 CPUs, 4 workers")
    assert c.apart and c.drift == pytest.approx(-0.2)
    se1, se2 = 0.03 * 1000 / 1.96, 0.03 * 800 / 1.96
    expect = math.sqrt(200.0 ** 2 / 2 - (se1 ** 2 + se2 ** 2) / 2) / 900.0
    assert c.pair_rel_sd == pytest.approx(expect) and c.run_rel_sd == pytest.approx(expect) and c.widens
    lo, hi = c.widen(500.0, [490.0, 510.0])
    extra = 1.96 * 500 * math.sqrt(expect ** 2 - RUN_SPREAD ** 2)
    assert 500 - lo == pytest.approx(math.hypot(10, extra)) and hi - 500 == pytest.approx(math.hypot(10, extra))
    assert c.widen(500.0, None) is None and c.widen(None, [1.0, 2.0]) == [1.0, 2.0]
    # the setting's rate: the mean of the two, its interval that of a mean of two runs with that spread
    hw = 1.96 * math.sqrt((se1 ** 2 + se2 ** 2) / 4 + (expect * 900) ** 2 / 2)
    assert c.pooled_samples_per_s == 900.0 and c.pooled_ci95 == pytest.approx([900 - hw, 900 + hw])
    assert "the pace moved between the two runs" in c.note() and f"{expect:.1%}" in c.note()
    assert c.to_dict()["note"] == c.note() and f"LOTUS_RUN_SPREAD={expect:.2g} adds" in c.note()


def test_without_a_within_run_width_the_default_spread_is_taken_out_of_the_interval():
    r = Reading("a", 1000.0, (950.0, 1050.0))
    hw = 50 / 1.96
    assert r.se(RUN_SPREAD) == pytest.approx(math.sqrt(hw ** 2 - 15.0 ** 2))
    assert Reading("b", 1000.0).se(RUN_SPREAD) == 0.0
    assert control_check(Reading("a", 0.0), Reading("b", 10.0), "x") is None


def test_a_host_spread_set_by_the_user_is_the_floor(monkeypatch):
    monkeypatch.setenv("LOTUS_RUN_SPREAD", "0.1")
    c = control_check(Reading("a", 1000.0, None, 0.01), Reading("b", 900.0, None, 0.01), "x")
    assert c.apart and c.pair_rel_sd < 0.1 and c.run_rel_sd == 0.1 and not c.widens


def test_the_control_repeats_the_probe_whose_own_interval_was_narrowest():
    from lotus.analysis.runspread import control_choice

    rs = [Reading("a", 100.0, (90.0, 110.0)), Reading("b", 100.0, (99.0, 101.0)), Reading("c", 1000.0, None, 0.01),
          Reading("d", 50.0, (49.5, 50.5)), Reading("e", None)]
    assert control_choice(rs) == 1  # b +-1% (its whole interval: no within-run width), c +-1%, d +-1%: the first
    assert control_choice([rs[0], rs[2]]) == 1 and control_choice([rs[4]]) is None and control_choice([]) is None
    assert Reading("x", 10.0).rel_halfwidth() == math.inf


def test_the_spread_a_pair_shows_half_the_time_is_that_of_drawn_pairs():
    """``even_odds_rel_sd``: runs whose pace spreads by that much (sd) are told apart by a pair with these own
    intervals in half of the pairs; checked against pairs drawn with that spread and those within-run errors."""
    import numpy as np

    first = Reading("a", 1000.0, (900.0, 1100.0), 0.10)
    again = Reading("a-control", 1000.0, (900.0, 1100.0), 0.10)
    c = control_check(first, again, "4 workers")
    se = 100.0 / 1.96
    assert c.even_odds_rel_sd == pytest.approx(math.hypot(se, se) * 1.929 / 1000.0, rel=1e-3)
    assert f"{c.even_odds_rel_sd:.0%} (sd) only half the time" in c.note()
    rng = np.random.default_rng(7)
    n = 40_000
    pace = 1000.0 * (1 + c.even_odds_rel_sd * rng.standard_normal((n, 2)))  # two runs' own paces
    read = pace + se * rng.standard_normal((n, 2))  # each read with its probe's own error
    shown = np.mean(np.abs(read[:, 0] - read[:, 1]) > 1.96 * math.hypot(se, se))
    assert shown == pytest.approx(0.5, abs=0.01)
    # twice and half that spread: shown as often as the normal law says (72% and 25%), not half the time
    for k in (2.0, 0.5):
        sd = math.sqrt(2 * (k * c.even_odds_rel_sd * 1000.0) ** 2 + 2 * se ** 2)
        expect = 1 - math.erf(1.96 * math.hypot(se, se) / sd / math.sqrt(2))
        pace = 1000.0 * (1 + k * c.even_odds_rel_sd * rng.standard_normal((n, 2)))
        read = pace + se * rng.standard_normal((n, 2))
        got = np.mean(np.abs(read[:, 0] - read[:, 1]) > 1.96 * math.hypot(se, se))
        assert got == pytest.approx(expect, abs=0.01) and abs(expect - 0.5) > 0.2
