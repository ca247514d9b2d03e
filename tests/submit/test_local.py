"""lotus submit end to end on this machine: real processes through lotus.launch (issue 10, item 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.submit.conftest import HEADER, lotus, tiny, write_csv


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return True


def _live_group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` that are not zombies (an init that does not reap leaves those)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out


def _traces(d: Path) -> list[Path]:
    return sorted(d.glob("*.lotustrace"))


@pytest.mark.timeout(180)
def test_concurrent_apps_are_traced_and_a_failing_one_is_reported(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", "name,command,workers,output_folder,submit_interval,cuda_device,port",
                    f'auto,"{tiny("--n", 96)}",auto,runs,0,0,29611',
                    f'fixed,"{tiny("--n", 96, "--workers", 3)}",1,runs,0,,29612',
                    f'broken,"{tiny("--exit", 3)}",0,runs,0,,')
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = lotus("submit", csv, "--mode", "concurrent", "--out", out, "--probe-steps", 5, "--no-figures", "--json",
              "--trial-seconds", 0)  # the side-by-side trials: tests/submit/test_trial.py
    took = time.monotonic() - t0
    assert r.exit_code == 1, r.output  # one app failed
    doc = json.loads(r.stdout)
    apps = {a["name"]: a for a in doc["apps"]}
    auto, fixed, broken = apps["auto"], apps["fixed"], apps["broken"]
    # the others went on and were traced, each into its own directory under its output folder
    for a in (auto, fixed):
        assert a["status"] == "ok" and a["exit_code"] == 0 and a["samples_per_s"] > 0, a
        assert 0 <= a["wait_share"] <= 1 and a["wall_s"] > 0 and a["gpu_idle_share"] is None  # CPU only
        assert Path(a["trace_dir"]).parent == out / "runs" and _traces(Path(a["trace_dir"]))
    assert broken["status"] == "failed" and broken["exit_code"] == 3
    assert "failing on purpose" in broken["stderr_tail"]
    # side by side: both started before either ended
    assert abs(auto["start_s"] - fixed["start_s"]) < min(auto["wall_s"], fixed["wall_s"])
    # the launcher applied the plan: workers override, CUDA_VISIBLE_DEVICES, MASTER_PORT, affinity of auto
    run = json.loads((Path(fixed["trace_dir"]) / "lotus-run.json").read_text())
    assert run["workers"] == 1 and run["exit_code"] == 0
    run = json.loads((Path(auto["trace_dir"]) / "lotus-run.json").read_text())
    assert run["cpus"] == auto["cpus"] and run["workers"] == auto["workers"] >= 1
    plan = {p["name"]: p for p in doc["plan"]["apps"]}
    assert plan["auto"]["env"]["CUDA_VISIBLE_DEVICES"] == "0" and plan["fixed"]["env"]["MASTER_PORT"] == "29612"
    # workers=auto: one short profiling probe through the launcher, then the model's curve
    assert [p["name"] for p in doc["probes"]] == ["auto"] and doc["probes"][0]["exit_code"] == 0
    assert plan["auto"]["cpus_source"] in ("model", "equal split")
    # one report over all the traced apps, and the table as JSON next to it
    html = (out / "report.html").read_text()
    assert "auto" in html and "fixed" in html and doc["report"] == str(out / "report.html")
    saved = json.loads((out / "submit.json").read_text())
    assert saved["apps"][2]["exit_code"] == 3
    # every rate with its 95% interval and why its run ended, apps and probes alike (the one protocol)
    for a in (auto, fixed, saved["apps"][0]):
        assert "ci95" in a and "stopped_by" in a and "note" in a
        assert a["ci95"] is None or a["ci95"][0] <= a["samples_per_s"] <= a["ci95"][1]
    probe = doc["probes"][0]
    assert {"ci95", "stopped_by", "note"} <= set(probe) and saved["probes"][0]["ci95"] == probe["ci95"]
    assert probe["stopped_by"] in ("steps", "precision", "time", None)
    print(f"3 concurrent apps + 1 probe: {took:.1f} s")


def test_the_table_shows_every_rate_with_its_interval_and_why_it_ended():
    from lotus.submit.results import AppResult, probe_lines, table_lines

    ok = AppResult(row=1, name="a1", status="ok", exit_code=0, wall_s=11.4, samples_per_s=178.8, wait_share=0.878,
                   gpu_idle_share=None, cpus="0", workers=1, trace_dir="out/a1", start_s=0.0, ci95=[170.1, 187.5],
                   note="interval +-4.9%: the job ended (or the cap stopped it) before +-3%")
    lines = table_lines([ok])
    assert lines[0].split()[:8] == ["app", "status", "exit", "wall", "s", "samples/s", "95%", "CI"]
    assert "178.8" in lines[2] and "170.1-187.5" in lines[2] and "job ended" in lines[2]
    assert lines[3] == f"note: a1: {ok.note}"
    probes = probe_lines([{"name": "a1", "exit_code": 0, "wall_s": 4.9, "cpus": 2, "workers": 1,
                           "samples_per_s": 201.0, "ci95": [196.0, 206.0], "stopped_by": "precision", "note": None},
                          {"name": "a2", "exit_code": 7, "wall_s": 1.0, "cpus": 2, "workers": 1,
                           "samples_per_s": None, "ci95": None, "stopped_by": None, "note": None,
                           "stderr_tail": "job: simulated OOM"}])
    assert probes[0] == "profiling probes:" and "196.0-206.0" in probes[3] and "precision" in probes[3]
    assert "failed" in probes[4] and "  | job: simulated OOM" in probes


@pytest.mark.timeout(60)
def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    marker = tmp_path / "started"
    cmd = f"touch {marker}"
    csv = write_csv(tmp_path / "apps.csv", HEADER + ",command,name",
                    f",,,auto,runs,29700,0,0,\"{cmd}\",one", f",,,2,runs,29701,4,1,\"{cmd}\",two")
    out = tmp_path / "out"
    r = lotus("submit", csv, "--mode", "concurrent", "--out", out, "--dry-run", "--cpus", "0-1")
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "plan: 2 app(s), concurrent" in text and "dry run: nothing started" in text
    assert "[1] one: start t+0 s; CPUs" in text and "[2] two: start t+4 s" in text
    assert "CUDA_VISIBLE_DEVICES=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29700" in text
    assert f"trace: {out / 'runs' / 'one'}" in text and "command: " in text
    r = lotus("submit", csv, "--out", out, "--dry-run", "--json", "--executor", "slurm")
    plan = json.loads(r.stdout)
    assert plan["dry_run"] and plan["mode"] == "sequential" and [a["name"] for a in plan["apps"]] == ["one", "two"]
    time.sleep(0.5)
    assert not marker.exists() and not out.exists()


def _wait_for(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(150)
def test_ctrl_c_stops_every_app_and_keeps_the_traces(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", "name,command,workers,output_folder",
                    f'a,"{tiny("--forever", "--n", 32, "--sleep", 0.01)}",1,runs',
                    f'b,"{tiny("--forever", "--n", 32, "--sleep", 0.01)}",1,runs')
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    # SIGINT back to its default in the child: a test run in the background would leave it ignored
    proc = subprocess.Popen([sys.executable, "-m", "lotus", "submit", str(csv), "--mode", "concurrent", "--out",
                             str(out), "--json", "--no-figures"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    try:
        def pids():
            got = []
            for name in ("a", "b"):
                try:
                    doc = json.loads((out / "runs" / name / "lotus-run.json").read_text())
                except (OSError, ValueError):
                    return None
                if not doc.get("pid") or not _traces(out / "runs" / name):
                    return None
                got.append(doc["pid"])
            return got

        jobs = _wait_for(pids, 90, "both apps to run and trace")
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    for pid in jobs:  # the jobs and their process groups (DataLoader workers) are gone
        _wait_for(lambda p=pid: not _alive(p), 10, f"job {pid} to end")
        _wait_for(lambda p=pid: not _live_group_members(p), 10, f"process group {pid} (workers) to end")
    doc = json.loads(stdout)
    assert doc["interrupted"] and {a["status"] for a in doc["apps"]} == {"interrupted"}
    for name in ("a", "b"):
        assert _traces(out / "runs" / name)  # traces kept
        run = json.loads((out / "runs" / name / "lotus-run.json").read_text())
        assert run["exit_code"] in (130, 137)


@pytest.mark.timeout(150)
def test_example_trainer_resnet18_on_a_generated_dataset(tmp_path):
    """The bundled trainer from torchloader's columns (arch + depth), a tiny JPEG dataset, a few CPU steps."""
    csv = write_csv(tmp_path / "apps.csv", HEADER + ",args,steps",
                    "resnet,18,4,1,runs,29620,0,none,--image-size 64 --device cpu --print-freq 1,3")
    out, data = tmp_path / "out", tmp_path / "data"
    r = lotus("submit", csv, "--data", data, "--generate", 24, "--out", out, "--no-figures", "--json")
    assert r.exit_code == 0, r.output
    (app,) = json.loads(r.stdout)["apps"]
    assert app["name"] == "resnet18-b4-w1" and app["status"] == "ok" and app["samples_per_s"] > 0
    run = json.loads((Path(app["trace_dir"]) / "lotus-run.json").read_text())
    assert run["command"][1].endswith("examples/train_imagenet.py") and run["steps_reached"]
    assert run["command"][3:9] == ["-a", "resnet18", "-b", "4", "-j", "1"]
    assert (out / "report.html").exists()
