"""`--cluster ADDRESS`: the scan on a real local Dask cluster (issue 26, item 2).

A scheduler and two worker processes started with Dask's own commands on 127.0.0.1; the commands'
`--json` outputs equal the local engine's; a worker killed while it holds a part: the scheduler runs the
part again elsewhere and the answer is the same; every worker gone: one line, exit 2, no answer; an
unreachable address: one line, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lotus.trace.synthetic import PipelineSpec, write_native
from tests.cli.conftest import run

pytest.importorskip("distributed")
HERE = Path(__file__).resolve().parent
DASK = str(Path(sys.executable).with_name("dask"))
COMMANDS = [("analyze", "stats"), ("analyze", "verdict"), ("analyze", "ranks"), ("info",)]


class Cluster:
    def __init__(self, tmp: Path):
        self.tmp, self.delay = tmp, tmp / "delay"
        self.env = {**os.environ, "LOTUS_TEST_DELAY_FILE": str(self.delay), "PYTHONWARNINGS": "ignore"}
        sched = tmp / "scheduler.json"
        self.scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                           "--scheduler-file", str(sched)], env=self.env, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 60
        while not sched.exists() and time.monotonic() < end:
            time.sleep(0.1)
        self.address = json.loads(sched.read_text())["address"]
        self.workers = [self.worker(i) for i in range(2)]
        self.wait_for(2)

    def worker(self, i: int) -> subprocess.Popen:
        return subprocess.Popen([DASK, "worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                 "--name", f"w{i}", "--preload", str(HERE / "cluster" / "slow_parts.py")],
                                env=self.env, stderr=subprocess.DEVNULL)

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30, set_as_default=False)

    def wait_for(self, n: int) -> None:
        with self.client() as c:
            c.wait_for_workers(n, timeout=60)

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("dask"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("job") / "job"
    write_native(d, PipelineSpec(n_batches=40, batch_size=6, n_workers=2, epochs=2, ranks=4, seed=3, sync=True,
                                 slow_rank=3, slow_rank_load=3.0), ranks_per_node=2)
    return d


def lotus(*args, env=None, timeout=120):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}, "LOTUS_ENGINE": "scan", **(env or {})}
    return subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.timeout(300)
def test_same_output_as_the_local_engine(cluster, job, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    for cmd in COMMANDS:
        local = run(*cmd, "-d", job, "--json", "--jobs", "1").output
        assert run(*cmd, "-d", job, "--json", "--cluster", cluster.address).output == local, cmd
    # the engine's own variable instead of the option, in a fresh process
    r = lotus("analyze", "verdict", "-d", job, "--json", env={"LOTUS_CLUSTER": cluster.address})
    assert r.returncode == 0 and r.stdout == run("analyze", "verdict", "-d", job, "--json", "--jobs", "1").output


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_analysis_gives_the_same_answer(cluster, job):
    local = lotus("analyze", "stats", "-d", job, "--json", env={"LOTUS_JOBS": "1"})
    assert local.returncode == 0
    cluster.delay.write_text("1.0")  # each part waits a second on its worker: time to kill one holding a part
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lotus", "analyze", "stats", "-d", str(job), "--json",
                                 "--cluster", cluster.address], env={**os.environ, "LOTUS_ENGINE": "scan"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim = _busy_worker(cluster)
        os.kill(cluster.workers[victim].pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        cluster.delay.write_text("0")
    assert proc.returncode == 0, err
    assert out == local.stdout  # the scheduler ran the lost part again on the other worker
    cluster.workers[victim].wait(timeout=30)
    cluster.workers[victim] = cluster.worker(victim)
    cluster.wait_for(2)


def _busy_worker(cluster, timeout: float = 60) -> int:
    """The index of a worker holding a part of the scan (polled on the scheduler)."""
    with cluster.client() as c:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            busy = [addr for addr, keys in c.processing().items() if keys]
            names = {addr: w.get("name") for addr, w in c.scheduler_info()["workers"].items()}
            for addr in busy:
                if str(names.get(addr, "")).startswith("w"):
                    return int(str(names[addr])[1:])
            time.sleep(0.05)
    raise AssertionError("no worker got a part of the scan")


@pytest.mark.timeout(300)
def test_every_worker_gone_is_one_line_and_no_answer(cluster, job):
    cluster.delay.write_text("2.0")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lotus", "analyze", "verdict", "-d", str(job), "--json",
                                 "--cluster", cluster.address],
                                env={**os.environ, "LOTUS_ENGINE": "scan", "LOTUS_CLUSTER_TIMEOUT": "3"},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _busy_worker(cluster)
        for w in cluster.workers:
            os.kill(w.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        cluster.delay.write_text("0")
    assert proc.returncode == 2 and out == ""
    assert err.splitlines() == [f"lotus: error: the cluster at {cluster.address} has had no worker for 3 s; "
                                "nothing was reported"], err
    for i, w in enumerate(cluster.workers):
        w.wait(timeout=30)
        cluster.workers[i] = cluster.worker(i)
    cluster.wait_for(2)


@pytest.mark.timeout(120)
def test_unreachable_address_is_one_line_exit_2(job):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for args, env in ((["--cluster", f"127.0.0.1:{port}"], {}), ([], {"LOTUS_CLUSTER": f"tcp://127.0.0.1:{port}"})):
        r = lotus("analyze", "stats", "-d", job, *args, env={"LOTUS_CLUSTER_TIMEOUT": "2", **env})
        assert r.returncode == 2 and r.stdout == ""
        (line,) = r.stderr.splitlines()
        assert line.startswith(f"lotus: error: cannot reach a Dask scheduler at tcp://127.0.0.1:{port} within 2 s")


def test_no_dask_import_without_a_cluster():
    code = "import sys\nfrom lotus.cli import main\nimport lotus.query.parallel\nprint('distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
