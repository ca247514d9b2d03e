"""lotus submit --executor slurm against a real single-node Slurm started for the test (slurm_cluster.py).

Skips, saying why, where Slurm cannot be started: no slurm-wlm/munge binaries (CI's clean clone), not root,
or daemons that do not come up. The local executor's tests carry the suite then.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.submit.conftest import lotus, tiny, write_csv
from tests.submit.slurm_cluster import LocalSlurm, SlurmNotAvailable, why_not


@pytest.fixture(scope="module")
def slurm():
    reason = why_not()
    if reason:
        pytest.skip(f"no local Slurm: {reason}")
    root = Path(tempfile.mkdtemp(prefix="lotus-slurm-", dir="/tmp"))  # short: the munge socket path
    cluster = LocalSlurm(root)
    try:
        cluster.start()
    except SlurmNotAvailable as exc:
        pytest.skip(f"Slurm could not be started here: {exc}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _job_cpus(job_id: str) -> int:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return int(out.split("NumCPUs=")[1].split()[0])


@pytest.mark.timeout(240)
def test_apps_run_as_slurm_jobs_through_the_same_launcher(tmp_path, slurm):
    csv = write_csv(tmp_path / "apps.csv", "name,command,workers,output_folder,submit_interval,cuda_device",
                    f'auto,"{tiny("--n", 64)}",auto,runs,0,',
                    f'fixed,"{tiny("--n", 64)}",0,runs,0,',
                    f'broken,"{tiny("--exit", 3)}",0,runs,0,')
    out = tmp_path / "out"
    r = lotus("submit", csv, "--executor", "slurm", "--partition", slurm.partition, "--time-min", 5, "--mode",
              "concurrent", "--out", out, "--probe-steps", 5, "--no-figures", "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    apps = {a["name"]: a for a in doc["apps"]}
    for name in ("auto", "fixed"):
        a = apps[name]
        assert a["status"] == "ok" and a["samples_per_s"] > 0 and a["job_id"], a
        trace = Path(a["trace_dir"])
        assert trace.parent == out / "runs" and list(trace.glob("*.lotustrace"))  # the launcher's trace, as locally
        assert f"Slurm job {a['job_id']}" in (trace / "stdout.log").read_text()  # it ran inside the allocation
        run = json.loads((trace / "lotus-run.json").read_text())
        assert run["exit_code"] == 0 and run["cpus"] is None  # affinity is Slurm's inside an allocation
    assert apps["broken"]["status"] == "failed" and apps["broken"]["exit_code"] == 3
    assert "failing on purpose" in apps["broken"]["stderr_tail"]
    # resources from the plan: the auto app's CPU count, workers + 1 for the others
    plan = {p["name"]: p for p in doc["plan"]["apps"]}
    assert _job_cpus(apps["fixed"]["job_id"]) == 1
    assert _job_cpus(apps["auto"]["job_id"]) == len(plan["auto"]["cpus"].split(",")) or \
        _job_cpus(apps["auto"]["job_id"]) == plan["auto"]["workers"] + 1
    assert doc["probes"] and doc["probes"][0]["exit_code"] == 0  # the profiling probe ran as a Slurm job too
    assert (out / "report.html").exists()


def test_without_slurm_commands_the_slurm_executor_is_bad_input(tmp_path, monkeypatch):
    import lotus.submit.slurm as slurm_mod

    monkeypatch.setattr(slurm_mod.shutil, "which", lambda name: None)
    csv = write_csv(tmp_path / "apps.csv", "name,command", f'a,"{tiny()}"')
    r = lotus("submit", csv, "--executor", "slurm", "--out", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0 and "sbatch not found" in r.stderr
    assert not (tmp_path / "out").exists()
    r = lotus("submit", csv, "--executor", "slurm", "--dry-run")  # the plan still prints, with a note
    assert r.exit_code == 0 and "slurm: nodes=1 ntasks_per_node=1 cpus_per_task=1" in r.stdout


def test_slurm_resources_come_from_the_plan():
    from lotus.submit.jobs import LaunchSpec
    from lotus.submit.slurm import slurm_resources

    spec = LaunchSpec(name="a", command=("x",), trace_dir="t", workers=3, cpus=(4, 5, 6, 7), n_cpus=4, gpus=2,
                      env={"CUDA_VISIBLE_DEVICES": "0,1", "MASTER_PORT": "29500"})
    assert slurm_resources(spec) == {"nodes": 1, "ntasks_per_node": 1, "cpus_per_task": 4, "gpus_per_node": 2}
    inside = spec.for_slurm()  # Slurm sets the affinity and the visible devices of the allocation
    assert inside.cpus is None and inside.env == {"MASTER_PORT": "29500"} and inside.workers == 3
    assert slurm_resources(LaunchSpec(name="b", command=("x",), trace_dir="t", workers=5))["cpus_per_task"] == 6
