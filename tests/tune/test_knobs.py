"""prefetch_factor, pin_memory, persistent_workers after num_workers, with the fake job of known truth."""

from __future__ import annotations

import pytest

from lotus.tune.core import TuneOptions, run_tuning
from lotus.tune.knobs import epoch_gain
from lotus.tune.types import LoaderSettings

from .fakes import CPUS, FakeJob, fitter, truth


def _tune(job, **kw):
    opts = TuneOptions(budget_minutes=None, steps=20, **{"control": False, **kw})
    return run_tuning(job, fitter(), cpus=CPUS, options=opts, clock=job.clock)


def _phase(r, phase):
    return [p for p in r.probes if p.phase == phase]


def test_all_settings_in_order_and_the_json():
    job = FakeJob(cuda=True)
    r = _tune(job)
    phases = [p.phase for p in r.probes]
    assert phases[0] == "baseline"
    order = [ph for i, ph in enumerate(phases) if ph not in phases[:i]]
    assert order == ["baseline", "num_workers", "prefetch_factor", "pin_memory", "persistent_workers"]
    assert r.best == LoaderSettings(num_workers=6, prefetch_factor=4, pin_memory=True, persistent_workers=True)
    assert r.samples_per_s == pytest.approx(truth(6, 4, True))
    assert r.gain == pytest.approx(truth(6, 4, True) / truth(2))
    d = r.to_dict()
    assert {"best", "samples_per_s", "baseline_samples_per_s", "probes", "seconds"} <= set(d)
    assert set(d["best"]) == {"num_workers", "prefetch_factor", "pin_memory", "persistent_workers"}
    assert {"name", "phase", "settings", "samples_per_s", "predicted_samples_per_s", "wait_share", "failed",
            "stderr_tail", "trace_dir"} <= set(d["probes"][0])
    assert r.best.snippet() == ("DataLoader(..., num_workers=6, prefetch_factor=4, pin_memory=True, "
                                "persistent_workers=True)")


def test_prefetch_ladder_stops_at_the_first_step_without_gain():
    r = _tune(FakeJob(), only=("num_workers", "prefetch_factor"))
    tried = [p.settings["prefetch_factor"] for p in _phase(r, "prefetch_factor")]
    assert tried == [4, 8]  # 4 gains 10 %, 8 nothing more: kept 4
    assert r.best.prefetch_factor == 4


def test_prefetch_not_tried_when_batches_arrive_in_time():
    r = _tune(FakeJob(wait_share=0.01), only=("num_workers", "prefetch_factor"))
    # the fake model predicts the 10 % gain of prefetch 4, so it is still tried once
    assert [p.settings["prefetch_factor"] for p in _phase(r, "prefetch_factor")] == [4, 8]

    class Flat:
        def predict(self, num_workers, cpus, prefetch_factor=None, **kw):
            from types import SimpleNamespace

            return SimpleNamespace(samples_per_s=truth(num_workers), wait_share=0.0,
                                   input_samples_per_s=truth(num_workers) * 2)

    job = FakeJob(wait_share=0.01)
    r = run_tuning(job, lambda ms: Flat(), cpus=CPUS, clock=job.clock,
                   options=TuneOptions(budget_minutes=None, only=("num_workers", "prefetch_factor"), control=False))
    assert not _phase(r, "prefetch_factor") and r.best.prefetch_factor == 2
    assert any(n.startswith("prefetch_factor: kept at 2") for n in r.notes)


def test_pin_memory_skipped_without_cuda():
    r = _tune(FakeJob(cuda=False), only=("num_workers", "pin_memory"))
    assert not _phase(r, "pin_memory") and r.best.pin_memory is False
    assert any("no-op" in n for n in r.notes)


def test_pin_memory_measured_with_cuda():
    r = _tune(FakeJob(cuda=True), only=("pin_memory",))
    (p,) = _phase(r, "pin_memory")
    assert p.settings["pin_memory"] is True and r.best.pin_memory is True
    assert r.best.num_workers == 2  # the job's own: num_workers not tuned


def test_persistent_workers_measured_across_an_epoch():
    r = _tune(FakeJob(batches_per_epoch=10, restart_s=0.5), only=("persistent_workers",))
    probes = _phase(r, "persistent_workers")
    assert probes and all(p.steps == 20 for p in probes)  # 10 per epoch + 10: crosses a boundary
    assert r.best.persistent_workers is True and r.epoch_gain > 0.1


def test_persistent_workers_estimated_for_long_epochs():
    job = FakeJob(batches_per_epoch=100_000, restart_s=0.5)
    r = _tune(job, only=("persistent_workers",))
    assert not _phase(r, "persistent_workers")  # no probe: an epoch is far longer than a probe
    assert r.best.persistent_workers is False  # 0.45 s per epoch of ~1400 s: not worth switching
    assert 0 < r.epoch_gain < 0.01
    assert any("estimated" in n for n in r.notes)
    r = _tune(FakeJob(batches_per_epoch=200, restart_s=5.0), only=("persistent_workers",))
    assert r.best.persistent_workers is True and r.epoch_gain > 0.01


def test_epoch_gain():
    assert epoch_gain(1.0, 0.0, 9.0) == pytest.approx(0.1)
    assert epoch_gain(0.0, 0.0, 9.0) == 0.0
    assert epoch_gain(0.1, 0.5, 9.0) < 0


def test_zero_workers_best_has_no_worker_settings():
    job = FakeJob(own=LoaderSettings(num_workers=0, prefetch_factor=None, pin_memory=False, persistent_workers=False))
    r = _tune(job, only=("prefetch_factor", "persistent_workers"))
    assert r.best == LoaderSettings(num_workers=0, prefetch_factor=None, pin_memory=False, persistent_workers=False)
    assert r.best.snippet() == "DataLoader(..., num_workers=0, pin_memory=False)"
    assert len(r.probes) == 1


def test_short_epochs_search_workers_with_persistent_ones():
    # probes of 20 batches cross epochs of 10: restarting workers (0.5 s) dwarfs an epoch (~0.1 s)
    job = FakeJob(batches_per_epoch=10, restart_s=0.5, default_steps=20)
    r = _tune(job, only=("num_workers", "persistent_workers"))
    assert any(n.startswith("num_workers: searched with persistent_workers=True") for n in r.notes)
    assert all(p.forced.get("persistent_workers") is True for p in r.probes if p.phase == "num_workers")
    assert r.best.num_workers == 6 and r.best.persistent_workers is True
    assert [p.forced.get("persistent_workers") for p in _phase(r, "persistent_workers")] == [False]
    # without persistent_workers to tune, the workers are searched as the job has them
    r = _tune(FakeJob(batches_per_epoch=10, default_steps=20), only=("num_workers",))
    assert not any(p.forced.get("persistent_workers") for p in r.probes)


def test_never_recommends_what_measured_slower_than_the_job():
    job = FakeJob(batches_per_epoch=10, restart_s=0.5, default_steps=20,
                  own=LoaderSettings(num_workers=6, prefetch_factor=2, pin_memory=False, persistent_workers=False))

    def slower_when_persistent(settings, phase, steps=None, below=None):
        m = job(settings, phase, steps)
        if m.ok and settings.persistent_workers and phase == "num_workers":
            m.samples_per_s *= 0.5
        return m

    r = run_tuning(slower_when_persistent, fitter(), cpus=CPUS, clock=job.clock,
                   options=TuneOptions(budget_minutes=None, only=("num_workers", "persistent_workers"), control=False))
    assert r.samples_per_s == r.baseline_samples_per_s and r.best.num_workers == 6
    assert any("nothing measured faster" in n for n in r.notes)


def _own(**kw):
    base = {"num_workers": 6, "prefetch_factor": 2, "pin_memory": False, "persistent_workers": False}
    return LoaderSettings(**{**base, **kw})


def test_a_costlier_prefetch_of_the_job_gives_way_to_2_when_they_cannot_be_told_apart():
    # prefetch buys nothing here; the job asked for 8: 2 is probed and, inside the interval, taken
    r = _tune(FakeJob(own=_own(prefetch_factor=8), pf_gain=0.0, ci_rel=0.05), only=("prefetch_factor",))
    assert [p.settings["prefetch_factor"] for p in _phase(r, "prefetch_factor")] == [2]
    assert r.best.prefetch_factor == 2
    assert any(n.startswith("prefetch_factor: 2: ") and ("cannot be told apart from 8: " in n or
                                                         "not slower than 8: " in n) and n.endswith("the cheaper 2")
               for n in r.notes), r.notes
    # prefetch 8 is 10% faster with +-1% intervals: 2 is probed, found below, and 8 kept (with the numbers)
    r = _tune(FakeJob(own=_own(prefetch_factor=8), ci_rel=0.01), only=("prefetch_factor",))
    assert [p.settings["prefetch_factor"] for p in _phase(r, "prefetch_factor")] == [2]
    assert r.best.prefetch_factor == 8
    assert any(n.startswith("prefetch_factor: the cheaper 2: ") and " below 8: " in n and n.endswith("kept 8")
               for n in r.notes), r.notes


def test_a_ladder_step_probed_and_rejected_says_so_with_both_intervals():
    # prefetch 4 gains 10% but the intervals (+-8%) overlap: not above, 2 kept, and the note gives both rates
    r = _tune(FakeJob(own=_own(), ci_rel=0.08), only=("prefetch_factor",))
    (p,) = _phase(r, "prefetch_factor")
    assert p.settings["prefetch_factor"] == 4 and r.best.prefetch_factor == 2
    four, two = truth(6, 4), truth(6, 2)
    note = (f"prefetch_factor: 4: {four:,.1f} ({four * 0.92:,.1f}-{four * 1.08:,.1f}) not above "
            f"{two:,.1f} ({two * 0.92:,.1f}-{two * 1.08:,.1f}): kept 2")
    assert note in r.notes, r.notes


def test_pin_memory_cheapest_among_equals_and_off_without_cuda():
    # no CUDA: pinning is a no-op; the job's True becomes False without a probe, and the note says why
    r = _tune(FakeJob(own=_own(pin_memory=True), cuda=False), only=("pin_memory",))
    assert not _phase(r, "pin_memory") and r.best.pin_memory is False
    assert any(n.startswith("pin_memory: False") and "no-op" in n for n in r.notes), r.notes
    # CUDA, pinning 5% faster but inside +-5% intervals: unpinned is probed and taken (the cheaper)
    r = _tune(FakeJob(own=_own(pin_memory=True), cuda=True, ci_rel=0.05), only=("pin_memory",))
    (p,) = _phase(r, "pin_memory")
    assert p.settings["pin_memory"] is False and r.best.pin_memory is False
    assert any(n.startswith("pin_memory: False: ") and "cannot be told apart from True: " in n for n in r.notes), \
        r.notes
    # tight intervals: pinning is measurably faster, True kept
    r = _tune(FakeJob(own=_own(pin_memory=True), cuda=True, ci_rel=0.005), only=("pin_memory",))
    assert r.best.pin_memory is True and any(n.endswith("kept True") for n in r.notes), r.notes
    # unpinned job, pinning probed and rejected inside the noise: a note with both rates
    r = _tune(FakeJob(own=_own(), cuda=True, ci_rel=0.05), only=("pin_memory",))
    assert r.best.pin_memory is False and any(n.startswith("pin_memory: True: ") and n.endswith("kept False")
                                              for n in r.notes), r.notes


def test_persistent_workers_of_the_job_dropped_when_they_save_nothing():
    job = FakeJob(own=_own(persistent_workers=True), batches_per_epoch=100_000, restart_s=0.5)
    r = _tune(job, only=("persistent_workers",))
    assert r.best.persistent_workers is False and 0 <= r.epoch_gain < 0.01
    assert any("the cheaper False" in n for n in r.notes), r.notes


def test_knob_probes_are_told_the_rate_they_must_beat():
    # a costlier value must be measured min_gain (2%) faster than the current best: its probe is given that rate
    # (shown under it, it has lost); a cheaper value must stay an equal of the best (lotus.tune.search.stop_below)
    from lotus.tune.search import stop_below

    job = FakeJob(own=_own(), cuda=True, ci_rel=0.03)
    r = _tune(job, only=("pin_memory",))
    (pin,) = _phase(r, "pin_memory")
    base = r.probes[0]
    assert pin.settings["pin_memory"] is True and r.best.pin_memory is False  # +5% at +-3%: not apart
    assert job.belows == [None, pytest.approx(base.samples_per_s * 1.02)]
    job = FakeJob(own=_own(pin_memory=True), cuda=True, ci_rel=0.03)
    r = _tune(job, only=("pin_memory",))
    base = r.probes[0]
    assert job.belows == [None, pytest.approx(stop_below(base.samples_per_s, tuple(base.ci95), 0.02))]
