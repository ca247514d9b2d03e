"""lotus stalls: four probes of an unmodified job, page cache controlled without root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lotus.profile import pagecache
from lotus.profile.stalls import stalls

JOB = str(Path(__file__).resolve().parent / "jobs" / "folder_train.py")


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    return generate_image_folder(tmp_path_factory.mktemp("data"), DatasetSpec(images=64, seed=2))


def test_pagecache_evict_warm_resident(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(1 << 20))
    assert pagecache.evict([str(f)]).files == 1
    assert pagecache.resident([str(f)]) == pytest.approx(0.0, abs=0.05)
    assert pagecache.warm([str(f)]).bytes == 1 << 20
    assert pagecache.resident([str(f)]) == pytest.approx(1.0, abs=0.05)
    missing = pagecache.evict([str(tmp_path / "nope")])
    assert missing.failed == 1 and "nope" in missing.first_error


@pytest.mark.timeout(600)
def test_split_measured_wait_and_differential():
    from lotus.profile.stalls import _split

    # H100, ResNet-18, 8 workers: warm 1,283 samples/s (99.8 ms per 128), replay 4,870 (26.3 ms)
    d = _split(128, 4870.0, 1282.5, None, 0.485)
    assert d["stall_source"] == "measured wait" and d["iteration_ms"] == pytest.approx(128 / 1282.5 * 1e3)
    assert d["prep_stall_share"] == pytest.approx(0.485) and d["compute_ms"] == pytest.approx(128 / 4870 * 1e3)
    assert d["loop_overhead_share"] == pytest.approx(1 - 0.485 - d["compute_share"])
    diff = _split(128, 4870.0, 1282.5, None)
    assert diff["stall_source"] == "differential" and diff["loop_overhead_ms"] == 0.0
    assert diff["prep_stall_share"] == pytest.approx(1 - 128 / 4870 / (128 / 1282.5))
    # a replay slower than the warm run's non-wait time: compute is what is left, no negative overhead
    d = _split(100, 500.0, 1000.0, 2000.0, 0.7)
    assert d["compute_ms"] == pytest.approx(30.0) and d["loop_overhead_ms"] == 0.0
    assert d["fetch_stall_ms"] == 0.0 and d["prep_stall_share"] == pytest.approx(0.7)


def test_stall_split_of_a_prep_bound_job(tmp_path, image_folder):
    report = stalls([sys.executable, JOB, str(image_folder), "--step-ms", "2"], tmp_path, steps=12)
    assert all(p.exit_code == 0 for p in report.probes.values()), report.probes
    assert set(report.probes) == {"listing", "warm", "cold", "ingestion"}
    assert report.files == 64 and report.batch_size == 8
    d = report.split()
    # the "model" takes 2 ms per batch: the ingestion probe runs at about that rate...
    # (busy-waiting 2 ms, plus the loop's own overhead on a loaded machine)
    assert 1.8 <= d["compute_ms"] <= 8
    # ...and one worker decoding and cropping 8 JPEGs takes much longer: prep-bound
    assert d["ingestion_samples_per_s"] > 1.5 * d["prep_samples_per_s"]
    assert d["prep_stall_share"] > 0.3
    assert d["fetch_stall_ms"] is not None and d["fetch_stall_ms"] >= 0
    parts = ("compute_share", "loop_overhead_share", "prep_stall_share", "fetch_stall_share")
    assert abs(sum(d[k] for k in parts) - 1) < 1e-9
    # the prep stall is the loop's own measured wait in the warm run (its share of the warm iteration)
    assert d["stall_source"] == "measured wait"
    assert d["warm_stall_share"] == pytest.approx(d["warm_measured_wait_share"])
    assert d["differential_stall_share"] is not None
    # every rate and the split carry their intervals (when the probes were long enough to have one)
    for rate, ci in ((d["prep_samples_per_s"], d["prep_ci95"]), (d["ingestion_samples_per_s"], d["ingestion_ci95"])):
        assert ci is None or ci[0] <= rate <= ci[1]
    if d["prep_ci95"] and d["ingestion_ci95"]:
        lo, hi = d["prep_stall_share_ci95"]
        assert lo <= d["prep_stall_share"] <= hi
    assert d["warm_measured_wait_share"] is not None and 0 <= d["warm_measured_wait_share"] <= 1


def _lotus(*args, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    return subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.timeout(600)
def test_cli_json_and_bad_input(tmp_path, image_folder):
    r = _lotus("stalls", "--steps", 6, "--out", tmp_path / "s", "--json", "--", sys.executable, JOB, image_folder,
               "--step-ms", 30)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("ingestion_samples_per_s", "prep_samples_per_s", "fetch_samples_per_s", "compute_ms",
                "prep_stall_ms", "fetch_stall_ms"):
        assert key in doc
    assert json.loads((tmp_path / "s" / "stalls.json").read_text())["batch_size"] == 8
    r = _lotus("stalls", "--steps", 6, "--out", tmp_path / "n", "--", sys.executable, "-c", "print('no loader')")
    assert r.returncode == 1 and r.stderr.strip().endswith(f"(traces in {tmp_path / 'n'})")
    assert "created no DataLoader" in r.stderr and len(r.stderr.strip().splitlines()) == 2  # progress + error
    assert _lotus("stalls").returncode == 2
    assert _lotus("stalls", "--", "no-such-command-lotus").returncode == 127


@pytest.mark.timeout(600)
def test_a_failed_probe_shows_its_stderr_and_the_split_goes_on(tmp_path):
    fixed = str(Path(__file__).resolve().parents[2] / "benchmarks" / "jobs" / "fixed_cost.py")
    out = tmp_path / "s"
    r = _lotus("stalls", "--steps", 40, "--max-seconds", 3, "--out", out, "--", sys.executable, fixed,
               "--batch-size", 4, "--step-ms", 2, "--fail-env", "LOTUS_REPLAY")
    assert r.returncode == 1, r.stderr  # a probe failed: exit 1, but the other probes and the split are there
    assert "warm page cache:" in r.stdout and "ended by" in r.stdout
    assert "ingestion failed (exit code 9); its stderr ends with:" in r.stdout
    assert "    | job: refusing to run under LOTUS_REPLAY" in r.stdout
    doc = json.loads((out / "stalls.json").read_text())
    assert "refusing to run under LOTUS_REPLAY" in doc["probes"]["ingestion"]["stderr_tail"]
    assert doc["probes"]["warm"]["exit_code"] == 0 and doc["prep_samples_per_s"] > 0
    assert "probe ingestion: exit code 9: job: refusing to run under LOTUS_REPLAY; the split goes on without it" \
        in doc["notes"]
    from lotus.analysis.report import build_report, render_html
    from lotus.analysis.runs import load_configs

    page = render_html(build_report(load_configs(out), data_dir=str(out)))
    assert "ingestion failed (exit code 9); its stderr ends with:" in page and "FAILED (9)" in page
