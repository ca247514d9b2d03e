"""lotus sensitivity: a few probes measured, the rest of CPUs x page cache predicted by lotus.model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lotus.errors import InputError
from lotus.profile.matrix import (
    FILES_UNKNOWN,
    Point,
    apply_measured,
    best_workers,
    check_grids,
    cpu_grid,
    monotone,
    next_point,
    predict,
)
from lotus.profile.matrix import demand as _demand
from lotus.profile.sensitivity import sensitivity

JOB = str(Path(__file__).resolve().parent / "jobs" / "folder_train.py")
FIXED = str(Path(__file__).resolve().parents[2] / "benchmarks" / "jobs" / "fixed_cost.py")  # the job of known cost


def test_cpu_grid_and_demand():
    assert cpu_grid(list(range(16))) == [1, 2, 4, 8, 16]
    assert cpu_grid(list(range(12))) == [1, 2, 4, 8, 12]
    assert cpu_grid([0]) == [1]
    m = [Point(c, g, s, False) for c, g, s in [(1, 0, 50), (2, 0, 90), (4, 0, 100), (1, 8, 60), (2, 8, 96),
                                               (4, 8, 100)]]
    assert _demand(m, 0.95) == {"cpus": 2, "cache_gb": 8, "samples_per_s": 96, "best_samples_per_s": 100,
                                "share_of_best": 0.96, "measured": False, "num_workers": None, "ci95": None,
                                "how": "predicted", "pi95": None, "note": None}
    assert _demand(m, 0.5)["cpus"] == 1 and _demand(m, 0.5)["cache_gb"] == 0
    assert _demand([Point(1, 0, None, False)], 0.95) is None


def test_workers_per_cpu_count_are_the_models_best_and_the_matrix_is_monotone():
    class Model:  # 8 ms of CPU per sample: the rate grows with workers up to the CPUs, then flat
        def predict(self, w, cpus, cache_hit_rate=None):
            from types import SimpleNamespace

            rate = 125.0 * min(max(w, 1), cpus) * (0.9 if w > cpus else 1.0)
            return SimpleNamespace(samples_per_s=rate, bottleneck="CPUs")

    assert best_workers(Model(), 2)[0] == 2  # not CPUs - 1 = 1: the 2-core job scales 2x
    assert best_workers(Model(), 1)[0] == 0 and best_workers(Model(), 4)[0] == 4
    m = [Point(1, 0, 120, True), Point(2, 0, 300, False), Point(4, 0, 260, True), Point(8, 0, 200, False)]
    assert monotone(m) == []
    assert [p.samples_per_s for p in m] == [120, 260, 260, 260]  # predicted points clamped by measured ones


class _Linear:  # 4 ms of CPU per sample: 250 samples/s per worker up to the CPUs
    def predict(self, w, cpus, cache_hit_rate=None):
        from types import SimpleNamespace

        return SimpleNamespace(samples_per_s=250.0 * min(max(w, 1), cpus) * (0.9 if w > cpus else 1.0),
                               bottleneck="CPUs")


def _probe(name, w, rate, ci, cache="warm"):
    return {"name": name, "num_workers": w, "samples_per_s": rate, "ci95": ci, "cache_state": cache,
            "stopped_by": "time", "note": "interval +-10.0%: the job ended (or the cap stopped it) before +-3%"}


def test_a_measured_point_is_shown_as_measured_with_the_models_count_beside_it():
    # the audit's 2-CPU case: the cold probe ran 1 worker (377, 340-414), the model's best for 2 CPUs is 2
    # workers (500 predicted); a noisy 2-worker warm probe read 289 (183-395). Before: the cold point showed
    # "289 predicted" (the prediction, then clamped to the noisy point).
    m = predict(_Linear(), [1, 2], [0.0, 0.006], None, None)
    measured = {(2, 0.0): [_probe("c2-cold", 1, 376.9, [340.2, 413.6], "cold")],
                (2, 0.006): [_probe("c2-m0.006-w2", 2, 289.0, [182.7, 395.3])],
                (1, 0.006): [_probe("c1-warm", 0, 428.8, [391.4, 466.2])]}
    apply_measured(m, measured)
    notes = monotone(m)
    at = {(p.cpus, p.cache_gb): p for p in m}
    cold = at[(2, 0.0)]
    assert cold.measured and cold.samples_per_s == 376.9 and cold.ci95 == [340.2, 413.6]
    assert cold.num_workers == 1 and cold.model_num_workers == 2 and cold.predicted_samples_per_s == 500.0
    assert cold.unsettled  # the model expects more than the interval at its own count: worth a probe there
    assert cold.cache_state == "cold" and cold.stopped_by == "time" and "+-10.0%" in cold.note
    assert at[(2, 0.006)].samples_per_s == 289.0 and not at[(2, 0.006)].unsettled
    # 1 CPU beats 2 CPUs warm, but their intervals overlap: not called out of order
    assert notes == []
    # with the intervals apart it is said
    measured[(2, 0.006)] = [_probe("c2-m0.006-w2", 2, 300.0, [290.0, 310.0])]
    m2 = predict(_Linear(), [1, 2], [0.0, 0.006], None, None)
    apply_measured(m2, measured)
    assert any("out of order" in n and "1 CPUs, 0.006 GB" in n for n in monotone(m2))
    # a second probe at the model's count settles the point: it shows that one
    measured[(2, 0.0)].append(_probe("c2-m0-w2", 2, 360.0, [350.0, 370.0], "cold"))
    m3 = predict(_Linear(), [1, 2], [0.0, 0.006], None, None)
    apply_measured(m3, measured)
    p = next(q for q in m3 if (q.cpus, q.cache_gb) == (2, 0.0))
    assert p.samples_per_s == 360.0 and p.num_workers == 2 and not p.unsettled


def test_predicted_points_are_clamped_by_measured_intervals_not_points():
    # a predicted 2-CPU point under a noisy measured 4-CPU point: clamped to its interval's top, not its value
    m = [Point(1, 0, 100, True, ci95=[95, 105]), Point(2, 0, 400, False), Point(4, 0, 250, True, ci95=[180, 320])]
    monotone(m)
    assert m[1].samples_per_s == 320
    # never below a measured neighbour's interval (fewer CPUs): the low bound wins a conflict
    m = [Point(1, 0, 300, True, ci95=[290, 310]), Point(2, 0, 100, False), Point(4, 0, 200, True, ci95=[190, 210])]
    monotone(m)
    assert m[1].samples_per_s == 290


def test_the_next_probe_is_the_demand_point_then_the_best_when_unmeasured_or_unsettled():
    m = [Point(1, 0, 100, True), Point(2, 0, 190, False, model_num_workers=2), Point(4, 0, 200, True)]
    assert next_point(m, _demand(m, 0.9))[0] is m[1]  # the demand point, predicted
    m[1].measured, m[1].unsettled = True, True
    assert next_point(m, _demand(m, 0.9)) == (m[1], "demand")  # measured at another count, the model expects more
    m[1].unsettled = False
    assert next_point(m, _demand(m, 0.9)) == (None, "")
    # an unsettled point whose prediction beats every measured one is the best to measure against
    m[2].unsettled, m[2].predicted_samples_per_s = True, 400.0
    assert next_point(m, _demand(m, 0.9)) == (m[2], "best")


def test_grids_are_checked_with_messages_for_people():
    assert check_grids([1, 2, 99], None, 2) == [1, 2]
    assert check_grids(None, [0, 1.5], 4) == [1, 2, 4]
    with pytest.raises(InputError, match=r"--cpus-grid 99: no CPU count between 1 and the 2 CPU"):
        check_grids([99], None, 2)
    with pytest.raises(InputError, match=r"--cache-gb must be sizes >= 0 GB, got -1"):
        check_grids(None, [0, -1], 2)
    with pytest.raises(InputError, match="nan"):
        check_grids(None, [float("nan")], 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, says", [(["--cpus-grid", "99"], "--cpus-grid 99: no CPU count between 1 and"),
                                        (["--cpus-grid", "a,b"], "--cpus-grid 'a,b': expected comma-separated"),
                                        (["--cache-gb", "-1"], "--cache-gb must be sizes >= 0 GB, got -1")])
def test_cli_bad_grids_are_one_line_and_exit_2(tmp_path, args, says):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    r = subprocess.run([sys.executable, "-m", "lotus", "sensitivity", *args, "--out", str(tmp_path / "s"), "--",
                        sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, timeout=100,
                       check=False)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"lotus: error: {says}") and not (tmp_path / "s").exists()


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    return generate_image_folder(tmp_path_factory.mktemp("data"), DatasetSpec(images=64, seed=4))


@pytest.mark.timeout(900)
def test_profile_measures_few_predicts_all_and_resumes(tmp_path, image_folder):
    cmd = [sys.executable, JOB, str(image_folder), "--step-ms", "2"]
    p = sensitivity(cmd, tmp_path / "s", steps=12, cpus_grid=[1, 2], max_probes=5)
    assert p.dataset_bytes and p.dataset_bytes > 0
    # 0, 25, 50, 75, 100% of a few MB of JPEGs, to the MB: each size once (matrix.cache_grid)
    assert len(set(p.cache_grid_gb)) == len(p.cache_grid_gb) >= 3
    assert len(p.matrix) == 2 * len(p.cache_grid_gb) and {q.cpus for q in p.matrix} == {1, 2}
    measured = [q for q in p.matrix if q.measured]
    assert 2 <= len(measured) <= 5 < len(p.matrix)  # most of the matrix is predicted (a probe at another
    # worker count than the model's best for its CPUs is no point of the matrix when the model predicts above it)
    probes = {pr["name"]: pr for pr in p.probes}
    assert {"c2-as-is", "c1-warm", "c2-cold"} <= set(probes)
    assert probes["c2-as-is"]["cache_state"] == "as-is" and probes["c2-cold"]["cache_state"] == "cold"
    # the control probe: of the probes whose page cache can be set again (not c2-as-is), the one whose interval
    # was narrowest for its rate, measured again at the end
    ctl = p.control
    ref, again = probes[ctl["first_probe"]], probes[ctl["repeat_probe"]]
    settable = [pr for pr in p.probes if pr["name"] != "c2-as-is" and not pr.get("control_of")]
    assert ref == min(settable, key=lambda pr: pr["within_rel_halfwidth"])
    assert ctl["repeat_probe"] == f"{ref['name']}-control" and again["control_of"] == ref["name"]
    assert (again["cpus"], again["num_workers"], again["cache"]) == (ref["cpus"], ref["num_workers"], ref["cache"])
    assert ctl["drift"] == pytest.approx(again["samples_per_s"] / ref["samples_per_s"] - 1)
    assert any(n.startswith(f"control: {ref['cpus']} CPUs") for n in p.notes)
    for q in measured:  # a measured point shows the probe's own rate (the control's setting: the two probes' mean)
        own = probes[q.probe]["samples_per_s"]
        assert q.samples_per_s == (ctl["pooled_samples_per_s"] if q.probe == ref["name"] else own)
    assert all(q.samples_per_s and q.samples_per_s > 0 for q in p.matrix)
    d = p.demand
    assert d is not None and d["samples_per_s"] >= 0.95 * d["best_samples_per_s"]
    assert d["cpus"] in (1, 2)
    assert d["measured"] or any("predicted, not measured" in n for n in p.notes)  # a measured point, or said
    assert all(q.num_workers is not None for q in p.matrix)
    assert all(q.ci95 is None or q.ci95[0] <= q.samples_per_s <= q.ci95[1] for q in measured)
    # resume: every probe is reused, nothing runs again
    t0 = time.monotonic()
    again = sensitivity(cmd, tmp_path / "s", steps=12, cpus_grid=[1, 2], max_probes=5)
    assert time.monotonic() - t0 < 30 and all(pr["reused"] for pr in again.probes)
    assert [q.samples_per_s for q in again.matrix if q.measured] == [q.samples_per_s for q in measured]


@pytest.mark.timeout(900)
def test_cli_json_heatmap_and_report(tmp_path, image_folder):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "lotus", "sensitivity", "--steps", "8", "--cpus-grid", "1,2",
                        "--max-probes", "3", "--out", str(out), "--json", "--", sys.executable, JOB, str(image_folder),
                        "--step-ms", "20"], env=env, capture_output=True, text=True, timeout=850, check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"cpus", "cache_gb", "samples_per_s", "measured"} <= set(doc["matrix"][0])
    assert {"cpus", "cache_gb"} <= set(doc["demand"])
    assert (out / "sensitivity.png").stat().st_size > 1000 and (out / "sensitivity.json").exists()
    from lotus.analysis.report import build_report
    from lotus.analysis.runs import load_configs

    report = build_report(load_configs(out), data_dir=str(out))
    assert report["sensitivity"]["demand"] == doc["demand"]


@pytest.mark.timeout(600)
def test_a_failed_probe_is_shown_with_its_stderr_and_the_search_goes_on(tmp_path):
    """The 1-CPU probe (0 workers) fails: its stderr tail is in the text, the JSON and the HTML report, the
    model's worker count for 1 CPU leaves 0 out, and notes say why the search stopped. The job's dataset is
    in memory (its files unknown): every probe's page cache is labelled as found, never warm or cold."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "lotus", "sensitivity", "--steps", "40", "--max-seconds", "3",
                        "--cpus-grid", "1,2", "--max-probes", "4", "--out", str(out), "--", sys.executable, FIXED,
                        "--batch-size", "4", "--step-ms", "2", "--fail-workers", "0"],
                       env=env, capture_output=True, text=True, timeout=580, check=False)
    assert r.returncode == 0, r.stderr
    assert "c1-as-is failed (exit code 7); its stderr ends with:" in r.stdout
    assert "    | job: simulated OOM with num_workers=0" in r.stdout
    assert "ended by" in r.stdout and FILES_UNKNOWN in r.stdout
    doc = json.loads((out / "sensitivity.json").read_text())
    failed = [p for p in doc["probes"] if p["exit_code"]]
    assert failed and failed[0]["name"] == "c1-as-is" and "simulated OOM" in failed[0]["stderr_tail"]
    assert any(n.startswith("probe c1-as-is failed: exit code 7: job: simulated OOM with num_workers=0; the search "
                            "goes on") for n in doc["notes"]), doc["notes"]
    assert any(n.startswith("the search stopped: ") for n in doc["notes"]), doc["notes"]
    assert doc["matrix"] and all(p["model_num_workers"] != 0 for p in doc["matrix"] if p["cpus"] == 1)
    assert all(p["cache_state"] == FILES_UNKNOWN for p in doc["probes"])
    assert all(p["cache_state"] == FILES_UNKNOWN for p in doc["matrix"] if p["measured"])
    from lotus.analysis.report import build_report, render_html
    from lotus.analysis.runs import load_configs

    page = render_html(build_report(load_configs(out), data_dir=str(out)))
    assert "c1-as-is failed (exit code 7); its stderr ends with:" in page and "simulated OOM" in page
    assert "ended by" in page and "FAILED (7)" in page


def test_the_report_rows_say_what_was_measured_and_the_demand_its_achieved_share():
    from dataclasses import asdict

    from lotus.analysis.answers import sensitivity_section

    pts = [Point(1, 0.0, 102.3, True, 98.0, "CPUs", "c1-warm", 0, [99.3, 105.4], "warm", 0, "time"),
           Point(2, 0.0, 376.9, True, 500.0, "CPUs", "c2-cold", 1, [340.2, 413.6], "cold", 2, None, unsettled=True),
           Point(4, 0.0, 390.0, False, 390.0, "CPUs", None, 4, model_num_workers=4)]
    doc = {"matrix": [asdict(p) for p in pts], "target": 0.95, "notes": ["the search stopped: x"], "probes": [],
           "demand": {"cpus": 2, "cache_gb": 0.0, "samples_per_s": 376.9, "best_samples_per_s": 390.0,
                      "measured": True, "num_workers": 1, "ci95": [340.2, 413.6]}}
    page = sensitivity_section(doc)
    assert "yes (99.3-105, warm, ended by: time cap)" in page  # was "yes (99.3-105warm)"
    assert "yes (340-414, cold, ended by: job ended, model's best 2 workers: 500)" in page
    assert "(96.6% of the best, 390; target 95.0%; measured)" in page  # was the target shown as the share
