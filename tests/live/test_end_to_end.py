"""`lotus top` on a real job: lotus's DataLoader running in another process, watched while it runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from lotus.cli import cli

REPO = Path(__file__).resolve().parents[2]
JOB = """
import sys, time
import torch
from torch.utils.data import Dataset
from lotus.dataloader import DataLoader


class Sleepy(Dataset):
    def __len__(self):
        return int(sys.argv[2])

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full((4,), float(i))


if __name__ == "__main__":
    loader = DataLoader(Sleepy(), batch_size=8, num_workers=2, trace_dir=sys.argv[1])
    for batch in loader:
        time.sleep(0.002)
    print("done", flush=True)
"""


def _start_job(tmp_path: Path, items: int) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    trace = tmp_path / "trace"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("LOTUS_TRACE_DIR", None)
    proc = subprocess.Popen([sys.executable, str(script), str(trace), str(items)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, trace


def _once(trace: Path) -> dict | None:
    r = CliRunner().invoke(cli, ["top", str(trace), "--once", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.stdout)


@pytest.mark.timeout(60)
def test_once_json_while_a_dataloader_runs(tmp_path):
    proc, trace = _start_job(tmp_path, 2000)  # ~250 batches of 40 ms per worker: ~5 s
    live = []  # live snapshots with samples/s and busy workers
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and proc.poll() is None:
            if trace.is_dir():
                snap = _once(trace)
                lds = snap["loaders"]
                if snap["live"] and lds and lds[0]["samples_per_s"] and lds[0]["workers"] and all(
                        (w["busy_share"] or 0) > 0 for w in lds[0]["workers"]):
                    live.append(snap)
            time.sleep(0.3)
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert live, "never saw a live snapshot with samples/s and busy workers"
    best = max(live, key=lambda s: s["samples_per_s"])  # the first ones include the workers' start-up
    ld = best["loaders"][0]
    assert ld["batch_size"] == 8 and ld["num_workers"] == 2
    assert [w["worker"] for w in ld["workers"]] == [0, 1]
    # 2 workers x 8 items x 5 ms: at most ~400 samples/s; the workers are the bottleneck
    assert 100 < ld["samples_per_s"] < 450
    assert all(w["busy_share"] > 0.3 for w in ld["workers"])
    assert best["samples_per_s"] == ld["samples_per_s"]
    after = _once(trace)
    assert not after["live"] and "closed" in after["job"]["reason"]
    assert after["loaders"][0]["samples_per_s"] > 0  # the last window of the run


@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)")
def test_refreshing_view_in_tmux(tmp_path):
    """The rich view in a real terminal: table headers and a samples/s figure, then the final line."""
    proc, trace = _start_job(tmp_path, 3000)  # ~7 s
    session = f"lotus-top-{os.getpid()}"
    lotus = Path(sys.executable).with_name("lotus")
    done = tmp_path / "done"
    try:
        while not any(trace.glob("*-main-*.lotustrace")) and proc.poll() is None:
            time.sleep(0.1)
        cmd = f"unset COLUMNS LINES; {lotus} top {trace} --interval 0.3; echo EXIT=$? > {done}; sleep 60"
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "40", cmd], check=True)

        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                  text=True, check=False).stdout

        seen_rate = False
        text = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done.exists():
            text = screen()
            rows = [line for line in text.splitlines() if line.lstrip().startswith("r0:0")]
            if "samples/s" in text and "busy" in text and rows and rows[0].split()[3] not in ("0.0", "?"):
                seen_rate = True
            time.sleep(0.3)
        proc.communicate(timeout=30)
        while time.monotonic() < deadline and not done.exists():
            time.sleep(0.2)
        text = screen()
        assert seen_rate, text
        assert done.read_text().strip() == "EXIT=0"
        assert "lotus top: job ended (" in text, text
        for header in ("loader", "epoch", "samples/s", "wait", "queue", "in flight", "busy", "slowest op"):
            assert header in text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
        if proc.poll() is None:
            proc.kill()
