"""lotus.model.check: every probe against the model (prediction before it, leave-one-probe-out), the variant
chosen by cross-validation, the prediction interval."""

from __future__ import annotations

import pytest

from lotus.model.check import MIN_PI, SLACK, Probe, check_probes, choose_variant, rel_error, tolerance


def _fit_rate_per_cpu(runs):
    """A model 'rate = a x CPUs' fitted by least squares on runs given as (cpus, rate)."""
    if not runs:
        return None
    num = sum(c * r for c, r in runs)
    den = sum(c * c for c, _ in runs)
    return num / den


def _fit_saturating(runs):
    """'rate = min(a x CPUs, top)': a from the smallest-CPU run, top from the largest."""
    if len(runs) < 2:
        return None
    lo, hi = min(runs), max(runs)
    return (lo[1] / lo[0], hi[1])


def _predict(model, cpus):
    if isinstance(model, tuple):
        return min(model[0] * cpus, model[1])
    return model * cpus


def _probes(points, ci=0.02):
    return [Probe(f"c{c}", (c, r), r, (r * (1 - ci), r * (1 + ci)), c) for c, r in points]


def test_probes_that_agree_hold_and_give_a_small_prediction_interval():
    chk = check_probes(_probes([(1, 100.0), (2, 202.0), (4, 396.0), (8, 805.0)]), _fit_rate_per_cpu, _predict)
    assert chk.holds is True and not chk.disagreeing
    assert all(c.loo_error is not None and abs(c.loo_error) < 0.03 for c in chk.probes)
    worst = max(abs(c.loo_error) for c in chk.probes)
    assert chk.prediction_interval == pytest.approx(max(worst, MIN_PI))  # never claims better than +-2%


def test_a_probe_far_off_the_others_model_disagrees_and_says_so():
    # the shape: 1 CPU measured 229 while a model of the others predicts ~8x that
    pts = [(1, 229.0), (16, 2565.0), (8, 1462.0)]
    chk = check_probes(_probes(pts), _fit_rate_per_cpu, _predict)
    assert chk.holds is False
    bad = {c.name for c in chk.disagreeing}
    assert "c16" in bad or "c1" in bad
    assert any("does not hold for this job" in n for n in chk.notes)
    for c in chk.disagreeing:
        assert abs(c.loo_error) > c.tolerance == pytest.approx(0.02 + SLACK)


def test_the_prediction_made_before_a_probe_is_kept_and_scored():
    p = Probe("c2", (2, 445.0), 445.0, (430.0, 460.0), 2, predicted_before=2079.0)
    chk = check_probes([p], _fit_rate_per_cpu, _predict)
    c = chk.probes[0]
    assert c.error_before == pytest.approx(2079 / 445 - 1) and c.disagrees and chk.holds is False


def test_cross_validation_picks_the_variant_that_explains_every_probe():
    pts = [(1, 200.0), (2, 400.0), (4, 800.0), (8, 1500.0), (16, 1520.0)]  # linear, then saturated
    name, chk = choose_variant(_probes(pts), {"linear": _fit_rate_per_cpu, "saturating": _fit_saturating}, _predict)
    assert name == "saturating"
    assert chk.variants["saturating"] < chk.variants["linear"]
    assert any("refitted as 'saturating'" in n for n in chk.notes)


def test_two_probes_cannot_compare_variants_and_keep_the_default():
    name, chk = choose_variant(_probes([(1, 200.0), (16, 1520.0)]),
                               {"linear": _fit_rate_per_cpu, "saturating": _fit_saturating}, _predict)
    assert name == "linear" and chk.variant == "linear"


def test_a_fit_or_prediction_that_fails_leaves_the_check_open():
    def broken(runs):
        raise RuntimeError("cannot fit")

    chk = check_probes(_probes([(1, 100.0), (2, 200.0)]), broken, _predict)
    assert chk.holds is None and chk.prediction_interval is None
    assert all(c.loo_error is None and not c.disagrees for c in chk.probes)


def test_errors_and_tolerance():
    assert rel_error(110.0, 100.0) == pytest.approx(0.1)
    assert rel_error(None, 100.0) is None and rel_error(1.0, 0.0) is None
    assert tolerance(100.0, (90.0, 110.0)) == pytest.approx(0.1 + SLACK)
    assert tolerance(100.0, None) == SLACK
