"""``lotus tune`` end to end on a tiny job (real probes through lotus.launch, the real model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = str(Path(__file__).resolve().parent / "jobs" / "tiny_job.py")


def _lotus(*args, timeout=150):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    return subprocess.run([sys.executable, "-m", "lotus", "tune", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.timeout(150)
def test_tune_end_to_end_json(tmp_path):
    out = tmp_path / "t"
    r = _lotus("--steps", "10", "--max-probes", "6", "--budget-minutes", "2", "--out", str(out), "--json", "--",
               sys.executable, JOB, "--item-ms", "2", "--step-ms", "3")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"best", "samples_per_s", "baseline_samples_per_s", "probes", "seconds"} <= set(doc)
    assert set(doc["best"]) == {"num_workers", "prefetch_factor", "pin_memory", "persistent_workers"}
    probes = doc["probes"]
    assert 3 <= len(probes) <= 7 and probes[0]["phase"] == "baseline"
    base, ctl = probes[0], doc["control"]
    assert base["settings"]["num_workers"] == 1 and base["samples_per_s"] > 0 and not base["failed"]
    # the control: the probe whose own interval was narrowest for its rate, measured again at the end (on top of
    # --max-probes); where that is the baseline, its rate is the mean of the two
    search = [p for p in probes[:-1] if p["phase"] != "persistent_workers" and not p["failed"]]
    ref = min(search, key=lambda p: (p["ci95"][1] - p["ci95"][0]) / p["samples_per_s"] if p["ci95"] else 9.0)
    assert probes[-1]["phase"] == "control" and probes[-1]["settings"] == ref["settings"]
    assert probes[-1]["in_series"] is None  # a process of its own: the pair spans two runs
    assert ctl["first_probe"] == ref["name"] and ctl["repeat_probe"] == probes[-1]["name"]
    assert ctl["seconds_apart"] > 0 and any(n.startswith("control: ") for n in doc["notes"])
    pooled = (ref["samples_per_s"] + probes[-1]["samples_per_s"]) / 2
    assert doc["baseline_samples_per_s"] == pytest.approx(pooled if ref is base else base["samples_per_s"])
    # the best was measured: one probe ran with its num_workers and gave its samples/s (the control's: the mean)
    assert any(p["samples_per_s"] == doc["samples_per_s"] and p["settings"]["num_workers"] == doc["best"]["num_workers"]
               for p in probes) or (doc["samples_per_s"] == pytest.approx(pooled)
                                    and ref["settings"]["num_workers"] == doc["best"]["num_workers"])
    assert doc["samples_per_s"] >= doc["baseline_samples_per_s"]  # else the job's own are kept (test_search.py)
    assert any(p["phase"] == "num_workers" for p in probes)
    assert all(Path(p["trace_dir"]).parent == out for p in probes)
    assert (out / "tune.json").exists()
    assert any("pin_memory" in n and "no-op" in n for n in doc["notes"])  # CPU only
    assert doc["seconds"] < 120
    # the probes ran in the job's one process (lotus.launch.series) but an epoch-crossing one, which has its own
    series = [p for p in probes if p["in_series"] is not None]
    assert [p["in_series"] for p in series] == list(range(len(series))) and len(series) >= 2
    pids = {json.loads(f.read_text())["pid"] for p in series for f in Path(p["trace_dir"]).glob("lotus-steps-*")}
    assert len(pids) == 1
    assert all(p["phase"] in ("persistent_workers", "control") for p in probes if p["in_series"] is None)


@pytest.mark.timeout(150)
def test_probes_in_a_process_each_when_asked(tmp_path):
    out = tmp_path / "t"
    r = _lotus("--steps", "10", "--max-probes", "3", "--only", "num_workers", "--process-per-probe", "--out", str(out),
               "--json", "--", sys.executable, JOB, "--item-ms", "2", "--step-ms", "3")
    assert r.returncode == 0, r.stderr
    probes = json.loads(r.stdout)["probes"]
    assert len(probes) >= 2 and all(p["in_series"] is None for p in probes)
    pids = {json.loads(f.read_text())["pid"] for p in probes for f in Path(p["trace_dir"]).glob("lotus-steps-*")}
    assert len(pids) == len(probes)


@pytest.mark.timeout(120)
def test_crashing_probes_are_marked_and_tuning_goes_on(tmp_path):
    from lotus.tune import tune

    # --crash-if-forced fails at start-up: a process of its own a probe
    r = tune([sys.executable, JOB, "--crash-if-forced"], out=tmp_path / "t", steps=8, max_probes=3,
             only=("num_workers",), one_process=False)
    base, *rest, ctl = r.probes
    assert not base.failed and base.samples_per_s > 0
    assert len(rest) == 2 and all(p.failed and p.exit_code == 3 for p in rest)
    assert all("refusing num_workers" in p.stderr_tail for p in rest)
    assert ctl.phase == "control" and not ctl.failed  # the job's own settings again: they run
    # the job's own, the only one that ran: the mean of its two probes
    assert r.best.num_workers == 1 and r.samples_per_s == pytest.approx((base.samples_per_s + ctl.samples_per_s) / 2)
    # the report of the directory shows each failed probe's stderr, and why every probe ended
    from lotus.analysis.report import build_report, render_html
    from lotus.analysis.runs import load_configs

    page = render_html(build_report(load_configs(tmp_path / "t"), data_dir=str(tmp_path / "t")))
    assert "p01-num_workers failed (exit code 3); its stderr ends with:" in page and "refusing num_workers" in page
    assert page.count("FAILED (3)") == 2 and "ended by" in page


@pytest.mark.timeout(120)
def test_bad_input_exit_codes(tmp_path):
    r = _lotus()
    assert r.returncode == 2 and "no command" in r.stderr
    r = _lotus("--", "no-such-command-xyz")
    assert r.returncode == 127 and r.stderr.strip().count("\n") == 0 and "not found" in r.stderr
    r = _lotus("--out", str(tmp_path / "n"), "--", sys.executable, JOB, "--no-loader")
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("lotus: error")]
    assert len(errors) == 1 and "no DataLoader" in errors[0]
    assert not (tmp_path / "n" / "p01-num_workers").exists()  # nothing after the first probe
