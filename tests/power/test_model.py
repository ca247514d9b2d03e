"""The predictor recovers a known model from noisy synthetic tables and predicts held-out points."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.model.power import TenantLoad, fit_power_model, time_sliced
from lotus.power.table import prediction_table
from tests.power.conftest import TRUE_PP, TRUE_TP, make_table, truth


def _rel(a, b):
    return abs(a / b - 1)


def test_fit_recovers_the_true_model_at_set_clocks():
    pm = fit_power_model(make_table(noise=0.01))
    assert pm.clock_fitted and not pm.mps and pm.rows == 72
    tp, pp = pm.throughput, pm.power
    # parameters are reported at the table's median clock: compare predictions at the truth's reference clock
    assert tp.clock_fraction == pytest.approx(TRUE_TP.clock_fraction, abs=0.1)
    assert pp.clock_exponent == pytest.approx(TRUE_PP.clock_exponent, abs=0.3)
    assert tp.host_ms == pytest.approx(TRUE_TP.host_ms, rel=0.1)
    assert pp.idle_w == pytest.approx(TRUE_PP.idle_w, rel=0.1)
    m = truth()
    for b, n, f in [(1, 1, 1005), (32, 2, 1200), (200, 4, 1900), (8, 3, 1500)]:
        want, got = m.predict(b, n, f), pm.predict(b, n, f)
        assert _rel(got.samples_per_s, want.samples_per_s) < 0.05
        assert _rel(got.power_w, want.power_w) < 0.05
    assert pm.fit_error["throughput"]["median_pct"] < 2 and pm.fit_error["power"]["median_pct"] < 2.5


def test_held_out_points_are_predicted_within_a_few_percent():
    df = make_table(noise=0.02, seed=3)
    test = (df["batch"].isin([4, 128])) | ((df["tenants"] == 2) & (df["batch"] == 16))
    pm = fit_power_model(df[~test])
    pt = prediction_table(pm, df[test])
    assert len(pt) == test.sum()
    assert pt["samples_per_s_err_pct"].abs().median() < 4
    assert pt["power_w_err_pct"].abs().median() < 4
    assert pt["samples_per_s_err_pct"].abs().max() < 10


def test_one_clock_keeps_the_priors_and_predicts_that_clock():
    df = make_table(clocks=(1980,), noise=0.01)
    pm = fit_power_model(df)
    assert not pm.clock_fitted
    assert pm.throughput.clock_fraction == 1.0 and pm.power.clock_exponent == 2.0
    assert 1950 < pm.default_clock_mhz(32, 2) < 2010
    pt = prediction_table(pm, df)
    assert pt["samples_per_s_err_pct"].abs().median() < 2 and pt["power_w_err_pct"].abs().median() < 3


def test_time_sliced_queue_between_no_contention_and_saturation():
    m = truth()
    g = m.throughput.gpu_fixed_ms + m.throughput.gpu_per_sample_ms * 256  # at the reference clock
    period1, u1 = time_sliced(m.throughput, 256, 1, 1500.0)
    assert period1[()] == pytest.approx(m.throughput.host_ms + g)
    period4, u4 = time_sliced(m.throughput, 256, 4, 1500.0)
    assert 256 * 4 / period4[()] <= 256 / g + 1e-9  # never above the GPU's capacity
    assert u4[()] > u1[()] and u4[()] <= 1.0
    det = m.throughput.__class__(**{**m.throughput.__dict__, "contention": 0.0})
    p_det, _ = time_sliced(det, 1, 2, 1500.0)  # deterministic: min(n / T1, 1 / g), switching cost added
    g1 = det.gpu_fixed_ms + det.gpu_per_sample_ms + det.switch_ms
    assert p_det[()] == pytest.approx(2 / min(2 / (det.host_ms + g1), 1 / g1))
    overlapped = det.__class__(**{**det.__dict__, "overlap": 1e6})  # host and GPU fully overlapped: max
    p_alone, _ = time_sliced(overlapped, 256, 1, 1500.0)
    assert p_alone[()] == pytest.approx(max(det.host_ms, det.gpu_fixed_ms + det.gpu_per_sample_ms * 256))


def test_mps_rows_fit_their_share_exponent():
    df = make_table(mps=True, shares=[0.25, 0.5, 1.0], noise=0.01)
    pm = fit_power_model(df)
    assert pm.mps and pm.throughput.share_exponent == pytest.approx(1.0, abs=0.1)
    pr = pm.predict_mix([TenantLoad(64, 0.5), TenantLoad(16, 0.25)], 1500.0)
    want = truth(mps=True).predict_mix([TenantLoad(64, 0.5), TenantLoad(16, 0.25)], 1500.0)
    assert _rel(pr.samples_per_s, want.samples_per_s) < 0.05 and len(pr.batch_period_ms) == 2


def test_power_absent_gives_nan_power_and_the_throughput_still_fits():
    df = make_table(clocks=(1500,)).assign(power_w=np.nan)
    pm = fit_power_model(df)
    assert pm.power is None and "power" not in pm.fit_error
    assert np.isnan(pm.predict(32, 2).power_w) and pm.predict(32, 2).samples_per_s > 0


def test_bad_tables():
    df = make_table(clocks=(1500,))
    with pytest.raises(KeyError, match="power_w"):
        fit_power_model(df.drop(columns="power_w"))
    with pytest.raises(ValueError, match="at least 3"):
        fit_power_model(df.head(2))
    two = df.assign(model=["a", "b"] * (len(df) // 2))
    with pytest.raises(ValueError, match="several models"):
        fit_power_model(two)
    assert fit_power_model(two, "a").model == "a"
    failed = df.assign(error="tenant 0: CUDA out of memory")
    with pytest.raises(ValueError, match="no usable rows"):
        fit_power_model(failed)
    with pytest.raises(ValueError, match="one batch size"):
        fit_power_model(df).predict_mix([TenantLoad(1, 0.5), TenantLoad(2, 0.5)], 1500.0)
