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

    def __init__(self, hidden: float):
        self.hidden, self.calls = hidden, []

    def __call__(self, command, options):
        cpus = len(options.cpus)
        w = options.workers if options.workers is not None else max(cpus - 1, 0)
        self.calls.append((cpus, w))
        slow = 1.0 + self.hidden * (8 - cpus) / 8
        spec = PipelineSpec(n_batches=48, batch_size=8, n_workers=w, epochs=1, load_ms=2.0 * slow,
                            ops_ms={"Decode": 6.0 * slow, "Crop": 1.0 * slow}, collate_ms_per_sample=0.05,
                            step_ms=4.0, jitter=0.05, cpus=cpus, seed=cpus * 100 + w)
        write_native(options.trace_dir, spec)
        return Probe(list(command), options.trace_dir, 0, wall_s=5.0, cpus=options.cpus, workers=w)


@pytest.fixture(autouse=True)
def _eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)


def _profile(tmp_path, hidden, max_probes=6):
    job = SyntheticJob(hidden)
    return sensitivity(["job"], tmp_path / "s", cpus_grid=GRID, max_probes=max_probes, launcher=job), job


def test_a_model_that_does_not_hold_is_caught_and_the_cpu_axis_measured(tmp_path):
    p, _ = _profile(tmp_path, hidden=3.0)
    mc = p.model_check
    assert mc is not None and mc["holds"] is False
    assert any(c["disagrees"] for c in mc["probes"])
    # every probe after the first carries the model's prediction made before it
    assert p.probes[0].get("predicted_before") is None
    assert all(pr.get("predicted_before") for pr in p.probes[1:])
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
    assert sum(q.how == "measured" for q in p.matrix) == len(p.probes) == 4
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
