"""lotus sensitivity: every probe checks the model; where it does not hold, the CPU axis is bisected and
measured, the rest interpolated between measured CPU counts, never shown unchecked (issue 24, item 1).

Probes are replayed from synthetic traces (lotus.trace.synthetic) of a job whose per-item cost grows as its
CPUs shrink (a hidden term lotus's model has no parameter for), or not (the model's own family)."""

from __future__ import annotations

import os

import pytest

from lotus.launch.runner import Probe
from lotus.profile.sensitivity import sensitivity
from lotus.trace.synthetic import PipelineSpec, write_native

GRID = [1, 2, 3, 4, 6, 8]


class SyntheticJob:
    """A launcher serving a synthetic trace of ``workers`` workers on ``cpus`` CPUs; ``hidden``: per-item cost
    x (1 + hidden x (8 - cpus) / 8)."""

    def __init__(self, hidden: float, n_batches: int = 48):
        self.hidden, self.calls, self.n_batches = hidden, [], n_batches

    def __call__(self, command, options):
        cpus = len(options.cpus)
        w = options.workers if options.workers is not None else max(cpus - 1, 0)
        self.calls.append((cpus, w))
        slow = 1.0 + self.hidden * (8 - cpus) / 8
        spec = PipelineSpec(n_batches=self.n_batches, batch_size=8, n_workers=w, epochs=1, load_ms=2.0 * slow,
                            ops_ms={"Decode": 6.0 * slow, "Crop": 1.0 * slow}, collate_ms_per_sample=0.05,
                            step_ms=4.0, jitter=0.05, cpus=cpus, seed=cpus * 100 + w)
        write_native(options.trace_dir, spec)
        return Probe(list(command), options.trace_dir, 0, wall_s=5.0, cpus=options.cpus, workers=w)


@pytest.fixture(autouse=True)
def _eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)


def _profile(tmp_path, hidden, max_probes=6, n_batches=48):
    job = SyntheticJob(hidden, n_batches)
    return sensitivity(["job"], tmp_path / "s", cpus_grid=GRID, max_probes=max_probes, launcher=job), job


def test_a_model_that_does_not_hold_is_caught_and_the_cpu_axis_measured(tmp_path):
    p, _ = _profile(tmp_path, hidden=3.0)
    mc = p.model_check
    assert mc is not None and mc["holds"] is False
    assert any(c["disagrees"] for c in mc["probes"])
    # every probe after the first carries the model's prediction made before it
    assert p.probes[0].get("predicted_before") is None
    assert all(pr.get("predicted_before") for pr in p.probes[1:] if not pr.get("control_of"))
    # files unknown: any probe's "as found" can be run again; the control repeats one of the search's probes
    assert p.probes[-1]["control_of"] in {pr["name"] for pr in p.probes[:-1]}
    hows = {q.cpus: q.how for q in p.matrix}
    measured = sorted(c for c, h in hows.items() if h == "measured")
    assert len(measured) >= 4 and measured[0] == 1 and measured[-1] == 8
    for q in p.matrix:  # between two measured CPU counts nothing is shown as the (failed) model's prediction
        if measured[0] < q.cpus < measured[-1] and q.how != "measured":
            assert q.how == "interpolated"
            lo = next(m for m in p.matrix if m.how == "measured" and m.cpus == max(
                c for c in measured if c < q.cpus))
            hi = next(m for m in p.matrix if m.how == "measured" and m.cpus == min(c for c in measured if c > q.cpus))
            assert min(lo.samples_per_s, hi.samples_per_s) <= q.samples_per_s <= max(lo.samples_per_s,
                                                                                       hi.samples_per_s)
            assert q.pi95 is not None
    assert any("does not hold for this job" in n for n in p.notes)
    doc = p.to_dict()
    assert doc["model_check"]["holds"] is False and {r["how"] for r in doc["matrix"]} <= {"measured", "interpolated",
                                                                                          "predicted"}


def test_a_model_that_holds_predicts_with_an_interval_from_its_probes(tmp_path):
    p, _ = _profile(tmp_path, hidden=0.0, max_probes=4)
    mc = p.model_check
    assert mc["holds"] is True and mc["prediction_interval"] is not None
    errs = [abs(c["loo_error"]) for c in mc["probes"] if c["loo_error"] is not None]
    assert errs and mc["prediction_interval"] == pytest.approx(max(*errs, 0.02))
    predicted = [q for q in p.matrix if q.how == "predicted"]
    assert predicted and all(q.pi95 and q.pi95[0] <= q.samples_per_s <= q.pi95[1] for q in predicted)


class NoWorkerFiles(SyntheticJob):
    """Traces whose workers' files are lost: rates from the main process, nothing to fit a model on."""

    def __call__(self, command, options):
        probe = super().__call__(command, options)
        for f in list(options.trace_dir.glob("lotus-r0-w*")):
            f.unlink()
        return probe


def test_a_model_that_cannot_be_fitted_leaves_measured_points_only_and_says_so(tmp_path):
    p = sensitivity(["job"], tmp_path / "s", cpus_grid=GRID, max_probes=4, launcher=NoWorkerFiles(0.0))
    assert any("the model could not be fitted" in n for n in p.notes)
    assert {q.how for q in p.matrix} <= {"measured", "interpolated", "unknown"}
    assert all(q.samples_per_s is None for q in p.matrix if q.how == "unknown")
    assert sum(q.how == "measured" for q in p.matrix) == len(p.probes) - 1 == 4  # and the control probe
    assert p.demand is not None and p.demand["how"] in ("measured", "interpolated")


def test_a_demand_the_intervals_leave_open_says_cannot_tell():
    from lotus.profile.matrix import Point, demand, demand_doubt

    m = [Point(1, 0, 50, True, ci95=[45, 55], how="measured"), Point(2, 0, 90, True, ci95=[60, 120], how="measured"),
         Point(4, 0, 100, True, ci95=[98, 102], how="measured")]
    d = demand(m, 0.95)
    assert d["cpus"] == 4
    assert "cannot tell whether 2 CPUs already reach 95%" in demand_doubt(m, d, 0.95)
    m[1].ci95 = [88, 92]  # settled
    assert demand_doubt(m, demand(m, 0.95), 0.95) is None
    # a demand point measured without an interval carries its note (the invariants harness found it bare)
    m[2].ci95, m[2].note = None, "40 batches after the ramp: too few for an interval"
    assert demand(m, 0.95)["note"] == m[2].note


def test_interpolation_keeps_the_models_shape_at_the_measurements_level():
    from lotus.profile.matrix import Point, interpolate

    # the GPU host's 4/8/12/16 CPUs: measured 864 and 2,456, the model 875/1,526/1,989/2,355
    m = [Point(4, 0, 864, True, predicted_samples_per_s=875, how="measured", ci95=[747, 981]),
         Point(8, 0, 1526, False, predicted_samples_per_s=1526),
         Point(12, 0, 1989, False, predicted_samples_per_s=1989),
         Point(16, 0, 2456, True, predicted_samples_per_s=2355, how="measured", ci95=[2288, 2624])]
    assert interpolate(m) == 2
    assert m[1].samples_per_s == pytest.approx(1526 * (864 / 875 + (2456 / 2355 - 864 / 875) / 3))
    assert m[1].how == m[2].how == "interpolated" and m[1].pi95 == [747, 2624]
    # without predictions: the straight line
    m = [Point(1, 0, 100, True, how="measured"), Point(2, 0, None, False), Point(3, 0, 300, True, how="measured")]
    interpolate(m)
    assert m[1].samples_per_s == pytest.approx(200)


class DriftingHost(SyntheticJob):
    """By the time of the control probe the host slows every step and item by ``factor`` (or the control fails)."""

    def __init__(self, factor: float, fail_control: bool = False, n_batches: int = 48):
        super().__init__(0.0, n_batches)
        self.factor, self.fail_control = factor, fail_control

    def __call__(self, command, options):
        control = options.trace_dir.name.endswith("-control")
        if self.fail_control and control:
            options.trace_dir.mkdir(parents=True, exist_ok=True)
            return Probe(list(command), options.trace_dir, 3, wall_s=1.0, cpus=options.cpus, workers=options.workers)
        if not control:
            return super().__call__(command, options)
        cpus = len(options.cpus)
        w = options.workers if options.workers is not None else max(cpus - 1, 0)
        self.calls.append((cpus, w))
        f = self.factor
        spec = PipelineSpec(n_batches=self.n_batches, batch_size=8, n_workers=w, epochs=1, load_ms=2.0 * f,
                            ops_ms={"Decode": 6.0 * f, "Crop": 1.0 * f}, collate_ms_per_sample=0.05 * f,
                            step_ms=4.0 * f, jitter=0.05, cpus=cpus, seed=cpus * 100 + w)
        write_native(options.trace_dir, spec)
        return Probe(list(command), options.trace_dir, 0, wall_s=5.0, cpus=options.cpus, workers=w)


def test_a_steady_host_the_control_finds_steady_and_nothing_widens(tmp_path):
    p, job = _profile(tmp_path, hidden=0.0, max_probes=3)
    ctl = p.control
    assert ctl is not None and not ctl["apart"] and ctl["drift"] == pytest.approx(0.0)
    by = {pr["name"]: pr for pr in p.probes}
    # the control repeats the probe whose own interval was narrowest for its rate (files unknown: any of them)
    search = [pr for pr in p.probes if not pr.get("control_of")]
    assert ctl["first_probe"] == min(search, key=lambda pr: pr["within_rel_halfwidth"])["name"]
    assert p.probes[-1]["name"] == f"{ctl['first_probe']}-control" and len(search) == len(p.probes) - 1
    k = [pr["name"] for pr in p.probes].index(ctl["first_probe"])
    assert len(job.calls) == len(p.probes) and job.calls[-1] == job.calls[k]  # the search's probes, the control
    for q in p.matrix:
        if q.how == "measured" and q.probe != ctl["first_probe"]:
            assert q.ci95 == by[q.probe]["ci95"]  # nothing widened
    assert any("no change of the host's pace shown" in n for n in p.notes)


def test_a_host_whose_pace_moves_widens_every_interval_and_says_so(tmp_path):
    steady, _ = _profile(tmp_path / "a", hidden=0.0, max_probes=3, n_batches=480)
    job = DriftingHost(factor=1.3, n_batches=480)  # the control probe runs 1.3x slower
    p = sensitivity(["job"], tmp_path / "b", cpus_grid=GRID, max_probes=3, launcher=job)
    ctl = p.control
    assert ctl["apart"] and ctl["drift"] < -0.15 and ctl["run_rel_sd"] > 0.05
    first = next(pr for pr in p.probes if pr["name"] == ctl["first_probe"])
    cell = next(q for q in p.matrix if q.probe == first["name"])
    assert cell.samples_per_s == pytest.approx(ctl["pooled_samples_per_s"]) and cell.ci95 == ctl["pooled_ci95"]
    assert cell.samples_per_s < first["samples_per_s"] and "the mean of" in cell.note
    before = {(q.cpus, q.cache_gb): q for q in steady.matrix}
    widened = 0
    for q in p.matrix:  # the same search as the steady host's up to the control: every interval now wider
        b = before[(q.cpus, q.cache_gb)]
        iv, ib = (q.ci95 or q.pi95), (b.ci95 or b.pi95)
        if q.probe == first["name"] or not iv or not ib:
            continue
        if q.how == "measured":
            assert q.samples_per_s == b.samples_per_s
            assert iv[1] - iv[0] > 2 * (ib[1] - ib[0])
            widened += 1
    assert widened >= 1
    assert any("the pace moved between the two runs" in n for n in p.notes)
    assert p.to_dict()["control"]["note"].startswith(f"control: {first['cpus']} CPUs")


def test_no_control_and_a_failed_control(tmp_path):
    job = SyntheticJob(0.0)
    p = sensitivity(["job"], tmp_path / "a", cpus_grid=GRID, max_probes=3, launcher=job, control=False)
    assert p.control is None and len(job.calls) == len(p.probes) and not any(n.startswith("control") for n in p.notes)
    bad = DriftingHost(factor=1.0, fail_control=True)
    q = sensitivity(["job"], tmp_path / "b", cpus_grid=GRID, max_probes=3, launcher=bad)
    assert q.control is None and q.probes[-1]["exit_code"] == 3
    assert any(n.startswith(f"the control probe {q.probes[-1]['name']} failed: exit code 3") for n in q.notes)
    assert [m.samples_per_s for m in q.matrix] == [m.samples_per_s for m in p.matrix]
