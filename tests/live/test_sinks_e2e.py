"""Live sinks on real jobs: `lotus run --tensorboard/--prometheus/--wandb` and the DataLoader's own route.

The job (tests/live/jobs/known_cost.py) sleeps a known time per sample and times its own steady state;
each sink's samples/s must be within 10% of that clock.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.live.conftest import free_port
from tests.live.test_sinks import wandb_records

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "live" / "jobs" / "known_cost.py"
TOLERANCE = 0.10


def _env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LOTUS_"))}
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**env, "PYTHONPATH": str(REPO / "src"), "HOME": str(tmp_path / "home"), **extra}


def _lotus_run(tmp_path: Path, sink_args: list[str], job_args: list[str], env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lotus", "run", "-o", str(tmp_path / "trace"), "--no-verdict", "--sink-period", "1",
           *sink_args, "--", sys.executable, str(JOB), "--out", str(tmp_path / "clock.json"), *job_args]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _scrape_while_running(proc: subprocess.Popen, port: int) -> tuple[list[list], str]:
    """Scrape the endpoint every 0.3 s while ``proc`` runs: the samples of each answered scrape, and
    ``proc``'s stderr."""
    from prometheus_client.parser import text_string_to_metric_families

    scrapes = []
    try:
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                scrapes.append([x for f in text_string_to_metric_families(text) for x in f.samples])
            except OSError:
                pass  # not serving yet
            time.sleep(0.3)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return scrapes, err


def _tensorboard_last(log_dir: Path, tag: str) -> tuple[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(log_dir))
    ea.Reload()
    last = ea.Scalars(tag)[-1]
    return last.step, last.value


@pytest.mark.timeout(120)
def test_lotus_run_publishes_to_all_three_within_10pct_of_the_jobs_clock(tmp_path):
    for pkg in ("tensorboard", "prometheus_client", "wandb"):
        pytest.importorskip(pkg)
    port = free_port()
    env = _env(tmp_path, WANDB_MODE="offline", WANDB_PROJECT="lotus-test-job")
    proc = _lotus_run(tmp_path, ["--tensorboard", "tb", "--prometheus", f"127.0.0.1:{port}", "--wandb"],
                      ["--wandb", "--batches", "200"], env)
    scrapes, err = _scrape_while_running(proc, port)
    assert proc.returncode == 0, err
    rank0 = [{x.name: x.value for x in samples if x.labels.get("rank", "0") == "0"} for samples in scrapes]
    scraped = [x for x in rank0 if x.get("lotus_job_running") == 1 and x.get("lotus_samples_per_second")]
    assert "lotus: " not in err.replace("lotus run: ", "")  # no sink complained
    clock = json.loads((tmp_path / "clock.json").read_text())
    truth = clock["samples_per_s"]
    mid = [x for x in scraped if 40 <= x["lotus_loader_batches_total"] < 200]  # while batches flow
    assert mid, f"never scraped a value while the loop ran ({len(scraped)} live scrapes)"
    assert mid[-1]["lotus_samples_per_second"] == pytest.approx(truth, rel=TOLERANCE)
    prom = scraped[-1]  # the last one while the job's process ran
    assert prom["lotus_samples_per_second"] == pytest.approx(truth, rel=TOLERANCE)
    assert prom["lotus_samples_per_second_ci95_low"] <= prom["lotus_samples_per_second"]
    assert 0 < prom["lotus_loader_wait_ratio"] <= 1 and 0 < prom["lotus_worker_busy_ratio"] <= 1
    step, tb = _tensorboard_last(tmp_path / "tb" / "lotus", "lotus/samples_per_s")
    assert step == clock["batches"] == 200  # global step: the loop's batch count
    assert tb == pytest.approx(truth, rel=TOLERANCE)
    trace = tmp_path / "trace"
    assert json.loads((trace / "lotus-run.json").read_text())["sidecar_pid"] > 0
    (run_dir,) = (trace / "wandb").glob(f"offline-run-*-{clock['wandb_run_id']}")  # the job's own run id
    records = wandb_records(run_dir)
    history = [x["history"]["item"] for x in records if x["type"] == "history"]
    assert history[-1]["lotus/step"] == 200
    assert history[-1]["lotus/samples_per_s"] == pytest.approx(truth, rel=TOLERANCE)
    (run,) = [x["run"] for x in records if x["type"] == "run"]
    assert run["project"] == "lotus-test-job"
    print(f"known cost: job {truth:.1f}, Prometheus {mid[-1]['lotus_samples_per_second']:.1f} (mid-run) "
          f"{prom['lotus_samples_per_second']:.1f} (last live), "
          f"TensorBoard {tb:.1f}, W&B {history[-1]['lotus/samples_per_s']:.1f} samples/s")


@pytest.mark.timeout(90)
def test_the_dataloaders_own_route_starts_the_same_sidecar(tmp_path):
    """`LOTUS_TENSORBOARD` read by lotus's DataLoader (no `lotus run`): one sidecar per trace directory, even
    with two loaders; it publishes at the end after the job's process is gone."""
    pytest.importorskip("tensorboard")
    env = _env(tmp_path, LOTUS_TENSORBOARD=str(tmp_path / "tb"), LOTUS_SINK_PERIOD="1")
    trace = tmp_path / "trace"
    r = subprocess.run([sys.executable, str(JOB), "--out", str(tmp_path / "clock.json"), "--lotus-sinks", "null",
                        "--trace-dir", str(trace), "--batches", "150"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    truth = json.loads((tmp_path / "clock.json").read_text())["samples_per_s"]
    deadline = time.monotonic() + 20  # the sidecar's final publish comes after the job ended
    while time.monotonic() < deadline:
        files = list((tmp_path / "tb" / "lotus").glob("events.out.tfevents.*"))
        if files and _tensorboard_last(tmp_path / "tb" / "lotus", "lotus/samples_per_s")[0] == 150:
            break
        time.sleep(0.5)
    assert len(files) == 1
    step, tb = _tensorboard_last(tmp_path / "tb" / "lotus", "lotus/samples_per_s")
    assert step == 150 and tb == pytest.approx(truth, rel=TOLERANCE)


@pytest.mark.timeout(90)
def test_bad_sinks_are_one_line_each_and_the_job_runs_on(tmp_path):
    """Port in use, a directory that cannot be created, W&B not logged in: one line each; the job's exit
    code and its trace are what they would be without sinks."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("prometheus_client")
    pytest.importorskip("wandb")
    (tmp_path / "a-file").write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _lotus_run(tmp_path, ["--tensorboard", str(tmp_path / "a-file" / "tb"), "--prometheus",
                                     f"127.0.0.1:{port}", "--wandb"], ["--batches", "40", "--exit", "3"],
                          _env(tmp_path, WANDB_MODE="online"))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    lines = [x for x in err.splitlines() if x.startswith("lotus: ")]
    assert sorted(x.split(":")[1] for x in lines) == [" Prometheus", " TensorBoard", " W&B"], err
    assert all("(the job runs on)" in x for x in lines)
    assert (tmp_path / "clock.json").exists()
    assert "lotus run: exit code 3" in err and "40 batches" in err


def test_bad_sink_options_are_usage_errors(tmp_path):
    from click.testing import CliRunner

    from lotus.cli import cli

    r = CliRunner().invoke(cli, ["run", "--prometheus", "http", "--", "true"])
    assert r.exit_code == 2 and "expected PORT or HOST:PORT" in r.output
    r = CliRunner().invoke(cli, ["run", "--prometheus", "70000", "--", "true"])
    assert r.exit_code == 2 and "1..65535" in r.output
    r = CliRunner().invoke(cli, ["run", "--no-trace", "--tensorboard", str(tmp_path), "--", "true"])
    assert r.exit_code == 2 and "drop --no-trace" in r.output


def test_the_traced_process_gets_nothing_new(tmp_path):
    """With sinks, the job's environment differs only by the marker that keeps its loaders from starting a
    sidecar of their own: the training process runs the same code, and the sink variables never reach it."""
    from lotus.launch.options import LaunchOptions, job_env
    from lotus.live.sinks import SinkOptions

    base = {"PATH": "/bin", "LOTUS_TENSORBOARD": "x", "LOTUS_PROMETHEUS": "9", "LOTUS_WANDB": "1"}
    plain = job_env(LaunchOptions(), tmp_path, base)
    with_sinks = job_env(LaunchOptions(sinks=SinkOptions(tensorboard="tb", prometheus="9108")), tmp_path, base)
    assert {k: v for k, v in with_sinks.items() if k != "LOTUS_SIDECAR"} == plain
    assert with_sinks["LOTUS_SIDECAR"] == "1"
    assert not {"LOTUS_TENSORBOARD", "LOTUS_PROMETHEUS", "LOTUS_WANDB"} & set(plain)


DDP = """
import time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, Dataset

class Sleepy(Dataset):
    def __len__(self):
        return 320

    def __getitem__(self, i):
        time.sleep(0.004)
        return i

dist.init_process_group("gloo")
ds = Sleepy()
loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds), num_workers=1)
n = sum(1 for _ in loader)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
def test_torchrun_one_endpoint_with_a_rank_label(tmp_path):
    """Under torchrun the one sidecar reads every rank's files: one endpoint, a series per rank; TensorBoard
    gets the ranks combined under lotus/ and each rank under lotus/rank<r>/."""
    pytest.importorskip("prometheus_client")
    pytest.importorskip("tensorboard")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not installed beside this Python")
    (tmp_path / "ddp.py").write_text(DDP)
    port = free_port()
    cmd = [sys.executable, "-m", "lotus", "run", "-o", str(tmp_path / "trace"), "--no-verdict", "--sink-period", "1",
           "--prometheus", f"127.0.0.1:{port}", "--tensorboard", str(tmp_path / "tb"), "--", str(torchrun),
           "--standalone", "--nproc-per-node", "2", str(tmp_path / "ddp.py")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(tmp_path), stderr=subprocess.PIPE, text=True)
    scrapes, err = _scrape_while_running(proc, port)
    assert proc.returncode == 0, err
    ranks = {x.labels["rank"] for samples in scrapes for x in samples if x.name == "lotus_samples_per_second"}
    assert ranks == {"0", "1"}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "tb" / "lotus"))
    ea.Reload()
    last = {tag: ea.Scalars(tag)[-1] for tag in ea.Tags()["scalars"]}
    assert last["lotus/samples_per_s"].step == 40  # rank 0's batches: 320 samples / 2 ranks / 4
    both = last["lotus/rank0/samples_per_s"].value + last["lotus/rank1/samples_per_s"].value
    assert last["lotus/samples_per_s"].value == pytest.approx(both)
