"""lotus sensitivity: a few probes measured, the rest of CPUs x page cache predicted by lotus.model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lotus.profile.sensitivity import Point, _demand, _monotone, best_workers, cpu_grid, sensitivity

JOB = str(Path(__file__).resolve().parent / "jobs" / "folder_train.py")


def test_cpu_grid_and_demand():
    assert cpu_grid(list(range(16))) == [1, 2, 4, 8, 16]
    assert cpu_grid(list(range(12))) == [1, 2, 4, 8, 12]
    assert cpu_grid([0]) == [1]
    m = [Point(c, g, s, False) for c, g, s in [(1, 0, 50), (2, 0, 90), (4, 0, 100), (1, 8, 60), (2, 8, 96),
                                               (4, 8, 100)]]
    assert _demand(m, 0.95) == {"cpus": 2, "cache_gb": 8, "samples_per_s": 96, "best_samples_per_s": 100,
                                "measured": False, "num_workers": None, "ci95": None}
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
    _monotone(m)
    assert [p.samples_per_s for p in m] == [120, 260, 260, 260]  # predicted points clamped by measured ones


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    return generate_image_folder(tmp_path_factory.mktemp("data"), DatasetSpec(images=64, seed=4))


@pytest.mark.timeout(900)
def test_profile_measures_few_predicts_all_and_resumes(tmp_path, image_folder):
    cmd = [sys.executable, JOB, str(image_folder), "--step-ms", "2"]
    p = sensitivity(cmd, tmp_path / "s", steps=12, cpus_grid=[1, 2], max_probes=5)
    assert p.dataset_bytes and p.dataset_bytes > 0
    assert len(p.matrix) == 2 * 5 and {q.cpus for q in p.matrix} == {1, 2}
    measured = [q for q in p.matrix if q.measured]
    assert 2 <= len(measured) <= 5 < len(p.matrix)  # most of the matrix is predicted (a probe at another
    # worker count than the model's best for its CPUs is no point of the matrix when the model predicts above it)
    probes = {pr["name"]: pr for pr in p.probes}
    assert {"c2-as-is", "c1-warm", "c2-cold"} <= set(probes)
    assert probes["c2-as-is"]["cache_state"] == "as-is" and probes["c2-cold"]["cache_state"] == "cold"
    for q in measured:  # a measured point shows the probe's own rate
        assert q.samples_per_s == probes[q.probe]["samples_per_s"]
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
