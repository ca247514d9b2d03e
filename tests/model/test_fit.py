"""The fitted model against synthetic runs of known truth: parameters, predictions, what runs identify."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.model import fit
from tests.model.conftest import OPS, TRUTH

pytestmark = pytest.mark.timeout(120)


def close(a, b, rel):
    return a == pytest.approx(b, rel=rel)


def test_parameters_recover_the_truth(truth_model):
    m = truth_model
    assert close(m.op_ms["load"].mean_ms, TRUTH["load_ms"], 0.03)
    for op, ms in OPS.items():
        assert close(m.op_ms[op].mean_ms, ms, 0.03), op
    assert close(m.warm_load_ms, TRUTH["load_ms"], 0.03)
    assert close(m.collate_ms_per_sample, TRUTH["collate_ms_per_sample"], 0.05)
    assert m.collate_ms_per_batch == 0.0
    assert close(m.step_ms[16].mean_ms, TRUTH["step_ms"], 0.03) and m.step_source == "step"
    # one item = load + ops + the simulator's 2 us gaps between parts
    assert close(m.sample_ms.mean_ms, 5.0, 0.03)
    t = m.traced
    assert (t.num_workers, t.cpus, t.batch_size, t.prefetch_factor, t.ranks) == (2, 4.0, 16, 2, 1)
    assert t.cpu_stretch == 1.0 and t.busy_workers == pytest.approx(2.0, rel=0.05)
    assert m.contention == 0.0 and not m.contention_identified
    assert m.cold_load_ms is None and any("cold" in x for x in m.missing)
    assert 0 < m.handoff_ms.mean_ms < 0.1 and m.free_gap_ms == pytest.approx(0.005, rel=0.1)
    d = m.to_dict()
    assert "measured" not in d and d["step_ms"]["16"]["count"] == 200


def test_predicts_the_traced_run(truth_model):
    m = truth_model
    p = m.predict(2, 4)
    assert close(p.samples_per_s, m.traced.samples_per_s, 0.05)
    assert p.wait_share == pytest.approx(m.traced.wait_share, abs=0.03)
    assert p.bottleneck == "preprocessing: load"


def test_more_workers_are_step_bound(truth_model):
    p = truth_model.predict(8, 4)
    assert p.bottleneck == "step (GPU/model)"
    assert p.wait_share < 0.01
    assert close(p.samples_per_s, 16 / 0.030, 0.04)


def test_one_worker_is_input_bound_at_the_right_rate(truth_model, make_run):
    p = truth_model.predict(1, 4)
    assert p.bottleneck == "preprocessing: load"
    per_batch_s = (16 * 5.0 + 16 * 0.1) / 1e3  # items + collation
    assert close(p.samples_per_s, 16 / per_batch_s, 0.05)
    measured = fit(make_run("w1", n_workers=1)).traced.samples_per_s
    assert close(p.samples_per_s, measured, 0.05)


@pytest.mark.parametrize(("workers", "cpus"), [(4, 4), (3, 8), (6, 3)])
def test_predicts_other_configurations_of_the_simulated_job(truth_model, make_run, workers, cpus):
    measured = fit(make_run(f"w{workers}c{cpus}", n_workers=workers, cpus=cpus)).traced.samples_per_s
    assert close(truth_model.predict(workers, cpus).samples_per_s, measured, 0.05)


def test_oversubscribed_run_is_destretched(make_run):
    m = fit(make_run("w6c3s5", n_workers=6, cpus=3, step_ms=5))
    assert m.traced.cpu_stretch > 2
    assert close(m.sample_ms.mean_ms, 5.0, 0.05)  # the uncontended item time
    p = m.predict(6, 3)
    assert p.bottleneck == "CPUs"
    assert close(p.samples_per_s, m.traced.samples_per_s, 0.05)


def test_zero_workers(truth_model):
    p = truth_model.predict(0, 4)
    assert p.bottleneck == "preprocessing: load" and p.wait_share > 0.5
    per_batch_s = (16 * 5.0 + 16 * 0.1 + 30) / 1e3
    assert close(p.samples_per_s, 16 / per_batch_s, 0.05)


def test_two_probes_identify_contention(make_run):
    one = make_run("k1", n_workers=1, cpus=8, contention=0.15, step_ms=5, seed=6)
    four = make_run("k4", n_workers=4, cpus=8, contention=0.15, step_ms=5, seed=7)
    six = fit(make_run("k6", n_workers=6, cpus=8, contention=0.15, step_ms=5, seed=8)).traced.samples_per_s
    single = fit(one)
    assert not single.contention_identified and single.predict(6, 8).samples_per_s > 1.3 * six  # optimistic
    m = fit([one, four])
    assert m.contention_identified and m.contention == pytest.approx(0.15, abs=0.03)
    assert close(m.predict(6, 8).samples_per_s, six, 0.05)
    assert [r.num_workers for r in m.runs] == [1, 4]


def test_batch_size_needs_a_run_at_it(make_run):
    r16 = make_run("b16", n_workers=8, cpus=16, seed=9)
    r32 = make_run("b32", n_workers=8, cpus=16, batch_size=32, step_ms=60, seed=10)
    p = fit(r16).predict(8, 16, batch_size=32)
    assert p.samples_per_s is None and "batch size 32 is unknown" in p.reason
    assert p.input_samples_per_s > 0  # what the workers could deliver is still known
    m = fit([r16, r32])
    assert close(m.predict(8, 16, batch_size=32).samples_per_s, fit(r32).traced.samples_per_s, 0.05)
    assert close(m.predict(8, 16, batch_size=24).samples_per_s, 24 / 0.045, 0.06)  # step interpolated: 45 ms


def test_cache_costs_are_never_invented(truth_model, make_run):
    p = truth_model.predict(2, 4, cache_hit_rate=0.5)
    assert p.samples_per_s is None and "cold" in p.reason
    assert truth_model.predict(2, 4, cache_hit_rate=1.0).samples_per_s is not None
    cold = make_run("cold", cache_state="cold", load_ms=9.0, seed=11)
    m = fit([make_run("w2"), cold])
    assert m.cold_source == "cold run" and close(m.cold_load_ms, 9.0, 0.03) and close(m.warm_load_ms, 4.0, 0.03)
    assert close(m.predict(2, 4, cache_hit_rate=0.0).samples_per_s, fit(cold).traced.samples_per_s, 0.05)
    assert close(m.predict(2, 4, cache_hit_rate=1.0).samples_per_s, m.traced.samples_per_s, 0.05)
    only_cold = fit(cold)
    assert only_cold.base_state == "cold"
    assert "warm" in only_cold.predict(2, 4, cache_hit_rate=1.0).reason


def test_io_model_and_io_bottleneck(truth_run):
    m = fit(truth_run, io_bytes_per_s=50e6, bytes_per_sample=1e6)  # 20 ms per cold read, 50 reads/s at most
    assert m.cold_source == "io_bytes_per_s" and close(m.cold_extra_ms, 20.0, 1e-6)
    p = m.predict(8, 16, cache_hit_rate=0.0)
    assert p.bottleneck == "I/O (cold reads)" and close(p.samples_per_s, 50.0, 1e-6)
    assert m.predict(8, 16, cache_hit_rate=0.9).samples_per_s > p.samples_per_s


def test_cold_first_reads_found_from_rereads(make_run):
    r = make_run("epochs2", epochs=2)
    ev = r.events.copy()
    slow = (ev["name"] == "load").to_numpy() & (ev["epoch"].to_numpy() == 0)
    ev.loc[slow, "dur_ns"] = ev.loc[slow, "dur_ns"] * 2  # the first epoch read from disk
    r.events = ev
    m = fit(r)
    assert m.cold_source == "re-reads in the run"
    assert close(m.cold_load_ms, 8.0, 0.05) and close(m.warm_load_ms, 4.0, 0.05)
    assert m.predict(2, 4, cache_hit_rate=0.0).samples_per_s < m.predict(2, 4, cache_hit_rate=1.0).samples_per_s


def test_straggler_tails_shape_the_prediction(make_run):
    """A slow batch every 10th holds up the in-order loop: the mean alone would over-predict."""
    r = make_run("strag", n_workers=3, step_ms=25, straggler_every=10, straggler_factor=6, seed=12)
    m = fit(r)
    assert close(m.predict(3, 4).samples_per_s, m.traced.samples_per_s, 0.05)


def test_unknown_cpus_and_bad_arguments(truth_model):
    p = truth_model.predict(4, None)
    assert p.samples_per_s is not None and any("CPUs not given" in n for n in p.notes)
    assert truth_model.predict(2, 0).reason == "cpus must be > 0"
    assert np.isfinite(truth_model.predict(2, 4, prefetch_factor=8).samples_per_s)


def test_probes_at_other_cpu_counts_fit_the_cpu_fraction(make_run):
    """Workers that wait half of the time (I/O, sleep) slow down less on fewer CPUs; one run cannot tell."""
    kw = {"cpu_fraction": 0.5, "step_ms": 5}
    few = make_run("io2", n_workers=4, cpus=2, seed=13, **kw)
    many = make_run("io8", n_workers=4, cpus=8, seed=14, **kw)
    truth = fit(make_run("io6c2", n_workers=6, cpus=2, seed=15, **kw)).traced.samples_per_s
    single = fit(many)
    assert single.cpu_fraction == 1.0 and not single.cpu_fraction_identified
    assert single.predict(6, 2).samples_per_s < 0.85 * truth  # assumes CPU work: pessimistic
    m = fit([few, many])
    assert m.cpu_fraction_identified and m.cpu_fraction == pytest.approx(0.5, abs=0.1)
    assert close(m.predict(6, 2).samples_per_s, truth, 0.05)
    assert m.to_dict()["cpu_fraction"] == m.cpu_fraction


def test_original_logs_with_waits_derive_the_step(tmp_path):
    from lotus.model import load_run
    from lotus.trace.synthetic import write_original
    from tests.model.conftest import spec

    write_original(tmp_path / "orig", spec(n_workers=2))
    m = fit(load_run(tmp_path / "orig"))
    assert m.step_source == "next request"
    assert close(m.step_ms[16].mean_ms, TRUTH["step_ms"], 0.05)
    assert close(m.predict(2, 4).samples_per_s, m.traced.samples_per_s, 0.05)


def test_ddp_run_is_modelled_per_rank(make_run):
    m = fit(make_run("ddp", n_workers=2, ranks=2, cpus=8, seed=16))
    assert m.traced.ranks == 2 and m.traced.cpus == 4.0
    assert any("2 ranks" in n for n in m.notes)
    assert close(m.predict(2, 4).samples_per_s, m.traced.samples_per_s, 0.05)


def test_runs_beyond_the_cpus_identify_the_cost_of_time_slicing(make_run):
    """Workers time-sliced on too few CPUs do more CPU work a batch (caches refilled at every turn): runs at
    three levels of it fit ``slicing``, and the model predicts a fourth level; one run cannot tell it."""
    kw = dict(cpus=4, slicing=0.2, step_ms=2, n_batches=240)
    runs = [make_run(f"s{w}", n_workers=w, seed=20 + w, **kw) for w in (6, 10, 16)]
    far = fit(make_run("s24", n_workers=24, seed=44, **kw)).traced.samples_per_s
    single = fit(runs[0])
    up = single.predict(24, 4)
    assert single.slicing == 0.0 and up.samples_per_s > 1.5 * far  # free slicing: optimistic...
    assert up.bound == "upper" and single.predict(6, 4).bound is None  # ...and said to be at most
    low = fit(runs[-1]).predict(6, 4)  # from the run that sliced most, fewer workers: at least
    assert low.bound == "lower" and low.samples_per_s < fit(runs[0]).traced.samples_per_s
    m = fit(runs)
    assert m.slicing == pytest.approx(0.2, abs=0.05) and m.slicing_identified
    assert close(m.predict(24, 4).samples_per_s, far, 0.08) and m.predict(24, 4).bound is None
    assert any("time-slicing" in n for n in m.notes)
    within = fit([make_run(f"c{w}", n_workers=w, cpus=16, slicing=0.2, step_ms=2, seed=60 + w) for w in (2, 4, 8)])
    assert within.slicing == 0.0  # never beyond the CPUs: nothing to fit, nothing assumed


def test_slicing_is_searched_beside_one_other_parameter_at_most(make_run):
    """Runs that would free the CPU fraction, the contention and slicing at once leave slicing at 0 (three
    parameters on a few runs: neither identified nor cheap), and say it was not fitted."""
    from lotus.model.fitting import _fit_cpu, _observed
    from lotus.sim import CpuModel

    kw = dict(slicing=0.2, step_ms=2, n_batches=160)
    runs = [make_run("fr1", n_workers=2, cpus=8, seed=71, **kw), make_run("fr2", n_workers=12, cpus=4, seed=72, **kw),
            make_run("fr3", n_workers=16, cpus=2, seed=73, **kw)]
    obs = [_observed(r) for r in runs]
    _cpu, alpha, phi, sliced = _fit_cpu(obs, CpuModel(), None, None)
    assert alpha and phi and not sliced and _cpu.slicing == 0.0
    _cpu, _alpha, _phi, sliced = _fit_cpu(obs, CpuModel(), 0.0, None)  # contention fixed: slicing beside phi
    assert sliced
