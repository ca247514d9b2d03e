"""The live sinks with their real parts: TensorBoard's reader, an HTTP scrape, W&B's offline run files."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from lotus.live.sinks import SinkOptions
from lotus.live.sinks import publisher as P
from lotus.live.sinks.values import run_values
from tests.live.conftest import SEC, free_port, write_known_run

REPO = Path(__file__).resolve().parents[2]


def _values(d, now_mono, **kw):
    from lotus.live import Tailer, snapshot

    write_known_run(d, now_mono - 20 * SEC, **kw)
    t = Tailer(d)
    t.poll()
    return run_values(t.state, snapshot(t.state, t.state.now_ns(False), 10.0), live=False, final=True)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_tensorboard_scalars_read_back_with_tensorboards_reader(tmp_path, now_mono):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from lotus.live.sinks.to_tensorboard import TensorBoardSink

    values = _values(tmp_path / "trace", now_mono)
    job = EventFileWriter(str(tmp_path / "tb"))  # the job's own SummaryWriter directory
    for step in range(3):
        job.add_event(Event(step=step, summary=Summary(value=[Summary.Value(tag="loss", simple_value=1.0)])))
    job.close()
    sink = TensorBoardSink(tmp_path / "tb")
    sink.publish(values)
    sink.close()
    ea = EventAccumulator(str(tmp_path / "tb" / "lotus"))
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    assert {"lotus/samples_per_s", "lotus/samples_per_s_ci95_lo", "lotus/samples_per_s_ci95_hi", "lotus/wait_share",
            "lotus/worker_busy_share", "lotus/gpu_idle_from_data_share", "lotus/slowest_op_share"} <= tags
    ((step, value),) = [(e.step, e.value) for e in ea.Scalars("lotus/samples_per_s")]
    assert step == 100 and value == pytest.approx(320)
    assert ea.Scalars("lotus/wait_share")[0].value == pytest.approx(0.2)
    own = EventAccumulator(str(tmp_path / "tb"))  # the job's run keeps its own scalars only
    own.Reload()
    assert own.Tags()["scalars"] == ["loss"]


def _scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_prometheus_endpoint_scraped_over_http(tmp_path, now_mono):
    pytest.importorskip("prometheus_client")
    from lotus.live.sinks.to_prometheus import PrometheusSink

    values = _values(tmp_path, now_mono)
    port = free_port()
    sink = PrometheusSink(f"127.0.0.1:{port}")
    try:
        assert not _scrape(port)["lotus_samples_per_second"].samples  # served before the first values
        sink.publish(values)
        fams = _scrape(port)
    finally:
        sink.close()
    (s,) = fams["lotus_samples_per_second"].samples
    assert s.labels == {"rank": "0", "loader": "train", "loader_id": "0", "host": socket.gethostname()}
    assert s.value == pytest.approx(320)
    assert fams["lotus_loader_wait_ratio"].samples[0].value == pytest.approx(0.2)
    assert fams["lotus_worker_busy_ratio"].samples[0].value == pytest.approx(0.3)
    assert fams["lotus_gpu_idle_from_data_ratio"].samples[0].value == pytest.approx(0.05)
    assert fams["lotus_samples_per_second_ci95_low"].samples[0].value == pytest.approx(320)
    (op,) = fams["lotus_slowest_op_ratio"].samples
    assert op.labels["op"] == "Resize" and op.value == pytest.approx(3.2 / 6, abs=1e-3)
    assert fams["lotus_loader_batches"].type == "counter"
    assert fams["lotus_loader_batches"].samples[0].value == 100
    assert fams["lotus_job_running"].samples[0].value == 0
    with pytest.raises(OSError):
        _scrape(port)  # closed
    served = {x.name for f in fams.values() for x in f.samples}
    dashboard = (REPO / "docs" / "grafana-lotus.json").read_text()
    used = set(re.findall(r"lotus_[a-z0-9_]+", dashboard))
    assert used and used <= served  # docs/grafana-lotus.json queries only what the endpoint serves


def test_port_in_use_unwritable_dir_missing_package_one_line_each(tmp_path, caplog, monkeypatch):
    pytest.importorskip("prometheus_client")
    pytest.importorskip("tensorboard")
    caplog.set_level(logging.WARNING, "lotus.live.sinks")
    (tmp_path / "a-file").write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        opts = SinkOptions(tensorboard=str(tmp_path / "a-file" / "tb"), prometheus=f"127.0.0.1:{port}")
        assert P.open_sinks(opts, tmp_path, None, None) == []
    msgs = _warnings(caplog)
    assert len(msgs) == 2
    assert msgs[0].startswith("TensorBoard: ") and "Not a directory" in msgs[0]
    assert msgs[1] == (f"Prometheus: cannot serve on 127.0.0.1:{port}: Address already in use; "
                       "no Prometheus metrics (the job runs on)")
    caplog.clear()
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    assert P.open_sinks(SinkOptions(prometheus="9"), tmp_path, None, None) == []
    (msg,) = _warnings(caplog)
    assert msg.startswith("Prometheus needs the prometheus package: pip install 'lotus-trace[prometheus]'")
    assert "\n" not in msg


class _Recorder:
    name = "recorder"

    def __init__(self):
        self.got, self.closed = [], False

    def publish(self, values):
        self.got.append(values)

    def close(self):
        self.closed = True


class _Broken(_Recorder):
    name = "tensorboard"

    def publish(self, values):
        raise OSError(28, "No space left on device")


class _Stalled(_Recorder):
    name = "prometheus"

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def publish(self, values):
        self.release.wait(30)


@pytest.mark.timeout(30)
def test_a_failing_or_stalled_sink_holds_up_nothing_else(tmp_path, now_mono, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, "lotus.live.sinks")
    write_known_run(tmp_path, now_mono - 20 * SEC)  # a finished job: the loop publishes once, at the end
    monkeypatch.setattr(P, "CLOSE_S", 1.0)
    ok, broken, stalled = _Recorder(), _Broken(), _Stalled()
    sinks = [P.SinkThread(s) for s in (broken, stalled, ok)]
    for _ in range(3):  # submit never blocks, also while a sink is stuck
        sinks[1].submit(object())
    t = time.monotonic()
    final = P.publish_loop(P.Follow(tmp_path), SinkOptions(tensorboard="x"), sinks, threading.Event())
    assert time.monotonic() - t < 5
    stalled.release.set()
    assert final.final and final.main.samples_per_s == pytest.approx(320)
    assert ok.got == [final] and ok.closed
    assert _warnings(caplog) == [
        "TensorBoard: [Errno 28] No space left on device; no more TensorBoard metrics (the job runs on)",
        "Prometheus: no answer within 1 s at the end; its last values may be missing"]


def _sidecar(run_dir: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    """The sidecar on a finished run: it publishes once (the final values) and exits."""
    return subprocess.run([sys.executable, "-m", "lotus.live.sinks", str(run_dir), *args], env=env, check=False,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def _env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return {**env, "PYTHONPATH": str(REPO / "src"), "HOME": str(tmp_path / "home"), **extra}


def wandb_records(path: Path) -> list[dict]:
    """The records of a W&B run log, read with W&B's own reader (``wandb leet inspect --json``)."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.timeout(120)
def test_wandb_offline_run_files_read_back(tmp_path, now_mono):
    pytest.importorskip("wandb")
    write_known_run(tmp_path / "trace", now_mono - 20 * SEC)
    r = _sidecar(tmp_path / "trace", "--wandb", "--job-cwd", str(tmp_path),
                 env=_env(tmp_path, WANDB_MODE="offline", WANDB_PROJECT="lotus-tests"))
    assert r.returncode == 0 and r.stderr == ""
    (run_dir,) = (tmp_path / "trace" / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    (run,) = [x["run"] for x in records if x["type"] == "run"]
    assert run["project"] == "lotus-tests" and run["display_name"] == "lotus-trace"
    (hist,) = [x["history"]["item"] for x in records if x["type"] == "history"]
    assert hist["lotus/step"] == 100
    assert hist["lotus/samples_per_s"] == pytest.approx(320)
    assert hist["lotus/wait_share"] == pytest.approx(0.2)


@pytest.mark.timeout(60)
def test_wandb_not_logged_in_is_one_line(tmp_path, now_mono):
    pytest.importorskip("wandb")
    write_known_run(tmp_path / "trace", now_mono - 20 * SEC)
    r = _sidecar(tmp_path / "trace", "--wandb", env=_env(tmp_path, WANDB_MODE="online"))
    assert r.returncode == 0
    assert r.stderr.splitlines() == ["lotus: W&B: No API key configured. Use `wandb login` to log in.; "
                                     "no more W&B metrics (the job runs on)"]


@pytest.mark.timeout(30)
def test_a_stopped_sidecar_cannot_hold_the_launcher(tmp_path, caplog):
    from lotus.live.sinks.spawn import finish_sidecar, start_sidecar

    caplog.set_level(logging.WARNING, "lotus.live.sinks")
    job = subprocess.Popen(["sleep", "1"])
    proc = start_sidecar(tmp_path, SinkOptions(tensorboard=str(tmp_path / "tb")), pid=job.pid, since_ns=None,
                         job_cwd=None, env=_env(tmp_path))
    os.kill(proc.pid, signal.SIGSTOP)  # a sidecar that hangs
    job.wait()
    t = time.monotonic()
    finish_sidecar(proc, timeout_s=1.0)
    assert time.monotonic() - t < 5 and proc.returncode == -signal.SIGKILL
    assert _warnings(caplog) == ["the metrics sidecar did not finish within 1 s after the job; stopped"]


def test_the_loader_starts_one_sidecar_per_directory_on_rank_0_only(tmp_path, monkeypatch):
    from lotus.dataloader import DataLoader

    for name in ("LOTUS_TRACE_DIR", "LOTUS_TENSORBOARD", "LOTUS_PROMETHEUS", "LOTUS_WANDB", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOTUS_SIDECAR", "")  # restored after the test (the loader sets it)
    started = []
    monkeypatch.setattr(os, "posix_spawn", lambda path, argv, env, **kw: started.append(argv) or 1)
    sinks = {"tensorboard": str(tmp_path / "tb"), "period_s": 2}
    for _ in range(2):  # two loaders, one trace directory: one sidecar
        DataLoader(range(8), trace_dir=tmp_path / "a", live_sinks=sinks)
    (argv,) = started
    assert argv[1:3] == ["-m", "lotus.live.sinks"] and argv[3] == str(tmp_path / "a")
    assert argv[argv.index("--pid") + 1] == str(os.getpid())
    assert argv[argv.index("--tensorboard") + 1] == str(tmp_path / "tb")
    assert argv[argv.index("--period") + 1] == "2"
    assert os.environ["LOTUS_SIDECAR"] == str(tmp_path / "a")  # inherited by the processes this one starts
    monkeypatch.setenv("RANK", "1")  # other ranks: rank 0's sidecar reads their files
    DataLoader(range(8), trace_dir=tmp_path / "b", live_sinks=sinks)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOTUS_SIDECAR", "1")  # lotus run's sidecar follows the directory already
    DataLoader(range(8), trace_dir=tmp_path / "c", live_sinks=sinks)
    monkeypatch.delenv("LOTUS_SIDECAR")
    monkeypatch.setenv("LOTUS_PROMETHEUS", "9108")  # the environment's way
    DataLoader(range(8), trace_dir=tmp_path / "d")
    assert len(started) == 2 and started[1][started[1].index("--prometheus") + 1] == "9108"
    with pytest.warns(UserWarning, match="no live metrics .*unknown keys"):
        DataLoader(range(8), trace_dir=tmp_path / "e", live_sinks={"tensorbord": "x"})
    with pytest.warns(UserWarning, match="live_sinks= publishes from the trace: give trace_dir="):
        DataLoader(range(8), live_sinks=sinks)
    assert len(started) == 2
