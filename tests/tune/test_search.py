"""The search over num_workers with a fake job of known truth (best at 6 workers on 8 CPUs)."""

from __future__ import annotations

import pytest

from lotus.tune.core import TuneOptions, run_tuning
from lotus.tune.search import choose, indistinct, neighbour_step, next_workers, worker_candidates
from lotus.tune.types import LoaderSettings, TuneError

from .fakes import CPUS, FakeJob, fitter, optimistic, truth

WORKERS = TuneOptions(only=("num_workers",), budget_minutes=None, control=False)  # the control: test_control.py


def _tune(job, fit=None, options=WORKERS):
    return run_tuning(job, fit or fitter(), cpus=CPUS, options=options, clock=job.clock)


def _worker_probes(r):
    return [p for p in r.probes if p.phase == "num_workers"]


def test_truth_is_best_at_six():
    rates = {w: truth(w) for w in range(17)}
    assert max(rates, key=rates.get) == 6


def test_candidates_and_neighbours():
    assert worker_candidates(8.0) == list(range(17))
    big = worker_candidates(64.0)
    assert big[:17] == list(range(17)) and big[-1] == 128 and len(big) < 60
    assert worker_candidates(4.0, max_workers=3) == [0, 1, 2, 3]
    assert [neighbour_step(w) for w in (0, 6, 15, 16, 40)] == [1, 1, 1, 2, 5]
    assert choose({4: 100.0, 6: 101.5, 8: 102.0}, 0.02) == 4  # free CPUs are worth something
    assert choose({4: 90.0, 6: 101.5, 8: 102.0}, 0.02) == 6


def test_next_workers_rules():
    cands = list(range(9))
    pred = {w: truth(w) for w in cands}
    assert next_workers({2: truth(2)}, set(), pred, cands, 0.05, 0.02) == (6, "proposal")
    nxt, why = next_workers({2: truth(2), 6: truth(6)}, set(), pred, cands, 0.05, 0.02)
    assert why == "neighbour" and nxt in (5, 7)
    done = {w: truth(w) for w in (2, 5, 6, 7)}
    nxt, why = next_workers(done, set(), pred, cands, 0.05, 0.02)
    assert nxt is None and why.startswith("converged")
    # a crashed neighbour counts as checked
    nxt, why = next_workers({2: truth(2), 6: truth(6), 5: truth(5)}, {7}, pred, cands, 0.05, 0.02)
    assert nxt is None
    # the model held at the probe that checked it (prediction before the probe within 5%): no neighbours
    held = [(truth(6) * 1.03, truth(6))]
    nxt, why = next_workers({2: truth(2), 6: truth(6)}, set(), pred, cands, 0.05, 0.02, held)
    assert nxt is None and "the model held" in why and "+3.0%" in why
    # ... but not when a probe missed by more, nor when the measured best is not where the model puts it
    missed = [*held, (truth(2) * 1.2, truth(2))]
    assert next_workers({2: truth(2), 6: truth(6)}, set(), pred, cands, 0.05, 0.02, missed)[1] == "neighbour"
    assert next_workers({2: truth(6) * 1.1, 6: truth(6)}, set(), pred, cands, 0.05, 0.02, held)[1] == "neighbour"
    # no model: a local climb around the measured best
    assert next_workers({2: 300.0}, set(), {}, cands, 0.05, 0.02)[0] in (1, 3)


@pytest.mark.parametrize("fit, neighbours", [
    pytest.param(fitter(), False, id="exact-model"),
    pytest.param(fitter(shape=optimistic), True, id="one-run-optimistic-model"),
    pytest.param(fitter(scale=0.7), True, id="model-30pct-low"),
    pytest.param(fitter(scale=1.3, shape=lambda w: 100.0 + 40 * w, learn_after=3), True, id="wrong-shape-then-learns"),
])
def test_converges_to_the_true_optimum_with_few_probes(fit, neighbours):
    job = FakeJob()
    r = _tune(job, fit)
    assert r.best.num_workers == 6
    assert r.samples_per_s == pytest.approx(truth(6))
    assert r.baseline_samples_per_s == pytest.approx(truth(2)) and r.baseline.num_workers == 2
    assert len(r.probes) <= 6 < 17  # an exhaustive sweep of 0..16 takes 17 probes
    probed = {p.settings["num_workers"] for p in r.probes}
    if neighbours:  # a model that missed a probe: the best's neighbours are measured
        assert {5, 6, 7} <= probed
    else:  # a model that held at the probe that checked it answers for them: 2 probes
        assert probed == {2, 6} and "the model held" in r.stopped


def test_stops_when_prediction_and_probes_agree():
    r = _tune(FakeJob())
    assert r.stopped.startswith("converged")
    assert r.predicted_samples_per_s == pytest.approx(truth(6))
    assert [p.settings["num_workers"] for p in r.probes][:2] == [2, 6]  # the model's proposal first


def test_noisy_probes_still_land_near_the_optimum():
    for seed in range(5):
        r = _tune(FakeJob(noise=0.03, seed=seed))
        assert truth(r.best.num_workers) >= 0.95 * truth(6)


def test_respects_the_time_budget():
    job = FakeJob(wall_s=30.0)
    opts = TuneOptions(only=("num_workers",), budget_minutes=2.0, control=False)
    r = _tune(job, fitter(shape=lambda w: 100.0 + 40 * w, learn_after=99), opts)
    assert r.seconds <= 120.0
    assert len(r.probes) == 4 and r.stopped == "budget spent"
    assert r.samples_per_s == max(p.samples_per_s for p in r.probes)


def test_respects_the_probe_cap():
    r = _tune(FakeJob(), fitter(scale=0.7),  # a model 30% low: its neighbours need probes
              options=TuneOptions(only=("num_workers",), max_probes=2, budget_minutes=None, control=False))
    assert len(r.probes) == 2 and r.stopped == "budget spent"


def test_a_crashing_probe_is_reported_and_the_search_goes_on():
    job = FakeJob(crash_at={6})
    r = _tune(job)
    failed = [p for p in r.probes if p.failed]
    assert len(failed) == 1 and failed[0].settings["num_workers"] == 6
    assert "out of memory" in failed[0].stderr_tail and failed[0].exit_code == 1
    assert failed[0].to_dict()["failed"] is True
    assert r.best.num_workers in (5, 7)  # the best that could run
    assert not any(p.stderr_tail for p in r.probes if not p.failed)


def test_no_dataloader_and_failed_baseline_end_the_tuning():
    with pytest.raises(TuneError, match="no DataLoader"):
        _tune(FakeJob(traced=False))
    job = FakeJob(crash_at={2})
    job.calls.clear()

    def crash_all(settings, phase, steps=None, below=None):
        m = job(settings, "x", steps)
        m.exit_code, m.samples_per_s, m.stderr_tail = 2, None, "boom"
        return m

    with pytest.raises(TuneError, match="exit code 2") as e:
        run_tuning(crash_all, fitter(), cpus=CPUS, options=WORKERS)
    assert e.value.stderr_tail == "boom"


def test_model_failure_leaves_the_probes_to_decide():
    def broken(ms):
        raise ValueError("no events")

    r = _tune(FakeJob(), broken)
    assert any("could not be fitted" in n for n in r.notes)
    assert truth(r.best.num_workers) >= truth(3)  # a local climb from the job's 2 workers
    assert all(p.predicted_samples_per_s is None for p in r.probes)


def test_job_setting_outside_the_range_still_counts():
    job = FakeJob(own=LoaderSettings(num_workers=24, prefetch_factor=2, pin_memory=False, persistent_workers=False))
    r = _tune(job)
    assert r.baseline.num_workers == 24 and r.best.num_workers == 6


def test_settings_inside_each_others_interval_go_to_the_cheapest():
    from lotus.tune.search import choose

    # 4 workers measured 221 +- 12, 3 workers 210 +- 11: cannot be told apart -> 3 (the 2-core case)
    measured = {1: 110.0, 2: 180.0, 3: 210.0, 4: 221.0}
    intervals = {1: (105.0, 115.0), 2: (170.0, 190.0), 3: (199.0, 221.0), 4: (209.0, 233.0)}
    assert choose(measured, 0.0, intervals) == 3
    # an interval too wide to say anything does not make a far slower count "equal" (GPU host, nw0 tune: 7
    # workers 1,194 (0-4,457) against 12 workers' 1,644 (1,500-1,790))
    assert choose({7: 1194.0, 12: 1644.0}, 0.02, {7: (0.0, 4457.0), 12: (1500.0, 1790.0)}) == 12
    assert choose({7: 1600.0, 12: 1644.0}, 0.02, {7: (0.0, 4457.0), 12: (1500.0, 1790.0)}) == 7  # -2.7%
    # tight intervals apart: the fastest
    tight = {w: (r * 0.995, r * 1.005) for w, r in measured.items()}
    assert choose(measured, 0.0, tight) == 4
    # without intervals the near_best share decides, as before
    assert choose(measured, 0.06) == 3 and choose(measured, 0.0) == 4


def test_knobs_need_intervals_apart_to_switch():
    from lotus.tune.knobs import _better
    from lotus.tune.types import LoaderSettings, Measurement

    def m(rate, lo, hi):
        return Measurement(settings=LoaderSettings(), samples_per_s=rate, ci95=(lo, hi))

    assert not _better(m(105, 98, 112), m(100, 95, 105), 0.02)  # +5% but overlapping
    assert _better(m(110, 106, 114), m(100, 97, 103), 0.02)
    # the cheaper value's test (the worker choice's): taken when it cannot be told apart from the best
    assert indistinct(96, (91, 101), 100, (95, 105), 0.0) and not indistinct(90, (87, 93), 100, (97, 103), 0.0)


def test_every_probe_is_checked_against_the_model():
    # a model 30% high everywhere: each probe's prediction made before it and its leave-one-out error are
    # reported, the probes disagree (beyond their +-3% interval + 10%) and the result says the model does not hold
    r = _tune(FakeJob(ci_rel=0.03), fit=fitter(scale=1.3))
    worker = [p for p in r.probes if p.phase in ("baseline", "num_workers") and not p.failed]
    assert len(worker) >= 3
    for p in worker[1:]:
        assert p.model_error == pytest.approx(p.predicted_samples_per_s / p.samples_per_s - 1)
        assert p.loo_error == pytest.approx(0.3, abs=1e-6) and p.disagrees
    assert r.model_check["holds"] is False and r.model_check["prediction_interval"] == pytest.approx(0.3, abs=1e-6)
    assert any("does not hold for this job" in n for n in r.notes)
    # the exact model holds, with a prediction interval at its floor
    ok = _tune(FakeJob(ci_rel=0.03))
    assert ok.model_check["holds"] is True and not any(p.disagrees for p in ok.probes)
    assert ok.model_check["prediction_interval"] == pytest.approx(0.02)


def test_probes_shown_below_the_best_end_early_and_the_choice_stays():
    # a model 30% low: the best's neighbours are probed; those clearly under the best so far end early (the
    # fake: a third of its time) and the search chooses as it does when every probe runs whole
    from lotus.tune.search import stop_below

    job = FakeJob(ci_rel=0.03)
    r = _tune(job, fitter(scale=0.7))
    ignore = FakeJob(ci_rel=0.03)
    full = run_tuning(lambda st, ph, steps=None, below=None: ignore(st, ph, steps), fitter(scale=0.7), cpus=CPUS,
                      options=WORKERS, clock=ignore.clock)
    assert r.best == full.best and r.best.num_workers == 6
    assert job.belows[0] is None  # the baseline: nothing to be below yet
    ended = [p for p in r.probes if p.stopped_by == "below"]
    assert ended and all(p.samples_per_s < truth(6) for p in ended)
    assert r.seconds < full.seconds
    # each probe was given the rate under which it could not be chosen, from the best measured before it
    seen = {}
    for (_, eff, _), below, p in zip(job.calls, job.belows, r.probes, strict=True):
        if seen:
            top = max(seen, key=lambda k: (seen[k][0], -k))
            assert below == pytest.approx(stop_below(seen[top][0], seen[top][1], 0.02))
        seen[eff.num_workers] = (p.samples_per_s, tuple(p.ci95))


def test_stop_below_is_where_a_probe_can_no_longer_be_chosen():
    from lotus.tune.search import stop_below

    assert stop_below(None, None, 0.02) is None
    assert stop_below(100.0, None, 0.02) == pytest.approx(98.0)
    # its interval reaching the best's counts only within EQUIVALENT (5%) of it
    assert stop_below(100.0, (90.0, 110.0), 0.02) == pytest.approx(95.0)
    assert stop_below(100.0, (97.0, 103.0), 0.02) == pytest.approx(97.0)
    assert stop_below(100.0, (99.0, 101.0), 0.02) == pytest.approx(98.0)  # within near_best of it
    # whatever rate and interval a probe ends with under the threshold, choose() does not pick it
    for best_ci in (None, (90.0, 110.0), (97.0, 103.0), (99.0, 101.0)):
        t = stop_below(100.0, best_ci, 0.02)
        rate, ci = t * 0.99, (t * 0.95, t * 0.999)
        assert not indistinct(rate, ci, 100.0, best_ci, 0.02)
        assert choose({4: 100.0, 2: rate}, 0.02, {4: best_ci, 2: ci}) == 4


def test_a_choice_the_probes_cannot_settle_says_so():
    # probes at +-30% (the GPU host's ResNet-18 JPEG job after 8 s of batches: +-28-53%): a count whose interval
    # reaches more than 5% above the chosen one's rate leaves the choice unsettled, in the result and a note
    r = _tune(FakeJob(ci_rel=0.30), fitter(scale=0.7))  # the best's neighbours (5, 7) get probed
    assert r.settled is False and r.unsettled_workers
    assert r.best.num_workers not in r.unsettled_workers
    note = next(n for n in r.notes if n.startswith("num_workers: not settled"))
    assert "+-30%" in note and "--max-seconds" in note
    d = r.to_dict()
    assert d["settled"] is False and d["unsettled_workers"] == r.unsettled_workers
    # tight probes settle it
    ok = _tune(FakeJob(ci_rel=0.01), fitter(scale=0.7))
    assert ok.settled is True and ok.unsettled_workers == [] and not any("not settled" in n for n in ok.notes)
    # num_workers not searched: nothing to say
    off = _tune(FakeJob(ci_rel=0.01),
                options=TuneOptions(only=("prefetch_factor",), budget_minutes=None, control=False))
    assert off.settled is None and off.to_dict()["settled"] is None


def test_unsettled_lists_the_counts_that_may_beat_the_choice():
    from lotus.tune.search import unsettled

    measured = {4: 913.0, 8: 803.0, 16: 815.0}
    assert unsettled(measured, {4: (880.0, 946.0), 8: (780.0, 826.0), 16: (790.0, 840.0)}, 4) == []
    assert unsettled(measured, {4: (880.0, 946.0), 8: (500.0, 1100.0), 16: (790.0, 840.0)}, 4) == [8]
    assert unsettled(measured, {}, 4) == []  # no intervals: nothing to say


class _Drifting:
    """The fake job whose pace moved by ``factor`` by the time of the control probe (or whose control fails)."""

    def __init__(self, job, factor: float, fail: bool = False):
        self.job, self.factor, self.fail, self.clock = job, factor, fail, job.clock

    def __call__(self, settings, phase, steps=None, **kw):
        m = self.job(settings, phase, steps, **kw)
        if phase == "control":
            if self.fail:
                m.exit_code, m.samples_per_s = 1, None
            else:
                m.samples_per_s *= self.factor
                m.ci95 = tuple(v * self.factor for v in m.ci95)
        return m


CONTROL = TuneOptions(only=("num_workers",), budget_minutes=None)


def test_the_control_probe_repeats_the_job_own_settings_and_pools_the_baseline():
    job = FakeJob(ci_rel=0.02)
    r = _tune(job, options=CONTROL)
    assert r.probes[-1].phase == "control" and r.probes[-1].settings == r.probes[0].settings
    assert job.calls[-1][1] == job.calls[0][1]  # the job's own settings, nothing forced
    ctl = r.control
    assert ctl["drift"] == pytest.approx(0.0) and not ctl["apart"]
    assert r.baseline_samples_per_s == pytest.approx(truth(2)) and r.best.num_workers == 6
    assert r.samples_per_s == pytest.approx(truth(6)) and r.ci95 == pytest.approx((truth(6) * 0.98, truth(6) * 1.02))
    assert any("no change of the host's pace shown" in n for n in r.notes)
    assert r.to_dict()["control"] == ctl


def test_a_pace_that_moved_widens_the_answer_and_says_when_it_cannot_tell():
    r = _tune(_Drifting(FakeJob(ci_rel=0.02), 0.6), options=CONTROL)
    ctl = r.control
    assert ctl["apart"] and ctl["drift"] == pytest.approx(-0.4) and ctl["run_rel_sd"] > 0.2
    assert r.baseline_samples_per_s == pytest.approx(truth(2) * 0.8)  # the mean of 1.0x and 0.6x
    lo, hi = r.ci95
    assert r.samples_per_s == pytest.approx(truth(6)) and hi - lo > 5 * 0.04 * truth(6)
    assert any("the pace moved between the two runs" in n for n in r.notes)
    assert any("cannot be told apart from the job's own" in n for n in r.notes)
    small = _tune(_Drifting(FakeJob(ci_rel=0.005), 0.95), options=CONTROL)  # 5% drift: still a clear gain
    assert small.control["apart"] and not any("cannot be told apart" in n for n in small.notes)


def test_a_failed_control_or_no_time_for_it_leaves_the_rates_as_measured():
    r = _tune(_Drifting(FakeJob(ci_rel=0.02), 1.0, fail=True), options=CONTROL)
    assert r.control is None and r.probes[-1].failed and r.baseline_samples_per_s == pytest.approx(truth(2))
    assert any(n.startswith("the control probe p") and "failed (exit code 1)" in n for n in r.notes)
    job = FakeJob(ci_rel=0.02)
    r = _tune(job, options=TuneOptions(only=("num_workers",), budget_minutes=0.4))  # 10-s probes in 24 s
    assert r.control is None and all(p.phase != "control" for p in r.probes)
    assert any(n.startswith("no control probe: the time budget is spent") for n in r.notes)


class _Narrow:
    """The fake job whose probes at ``w`` workers read +-0.5%, the others +-2%."""

    def __init__(self, job, w: int):
        self.job, self.w, self.clock = job, w, job.clock

    def __call__(self, settings, phase, steps=None, **kw):
        m = self.job(settings, phase, steps, **kw)
        if m.ok and m.effective.num_workers == self.w:
            m.ci95 = (m.samples_per_s * 0.995, m.samples_per_s * 1.005)
        return m


def test_the_control_repeats_the_narrowest_probe_and_pools_the_chosen_when_it_is_that_one():
    job = FakeJob(ci_rel=0.02)
    r = _tune(_Narrow(job, 6), options=CONTROL)
    ctl = r.control
    ref = next(p for p in r.probes if p.name == ctl["first_probe"])
    assert ref.settings["num_workers"] == 6 and r.probes[-1].forced == {"num_workers": 6}
    assert job.calls[-1][1].num_workers == 6 and ctl["note"].startswith(f"control: num_workers=6 ({ref.name})")
    assert r.best.num_workers == 6 and r.samples_per_s == pytest.approx(truth(6))  # the chosen: the two's mean
    assert r.ci95 == pytest.approx(ctl["pooled_ci95"]) and r.baseline_samples_per_s == pytest.approx(truth(2))
    assert r.baseline_ci95 == pytest.approx((truth(2) * 0.98, truth(2) * 1.02))  # steady: not widened


def test_a_recommendation_the_control_s_mean_leaves_without_its_gain_is_not_made():
    # the job's own settings (2 workers) read 4x faster in the control: their mean beats 6 workers' measurement
    r = _tune(_Drifting(FakeJob(ci_rel=0.02), 4.0), options=CONTROL)
    pooled = truth(2) * 2.5
    assert r.control["apart"] and r.baseline_samples_per_s == pytest.approx(pooled) and pooled > truth(6)
    assert r.best.num_workers == 2 and r.samples_per_s == pytest.approx(pooled) and r.gain == pytest.approx(1.0)
    assert r.best == r.baseline and r.ci95 == pytest.approx(r.baseline_ci95)
    assert any(n.startswith("after the control the recommended settings") and n.endswith("are kept") for n in r.notes)
