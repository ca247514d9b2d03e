"""``lotus run --repeat N``: the command run N times, each a process of its own into DIR/r1..rN, then what the
runs say together, the same as ``lotus analyze throughput -d DIR --repeats`` (issue 24: intervals that match
repeated runs, checked on the user's own job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = str(Path(__file__).resolve().parents[1] / "tune" / "jobs" / "tiny_job.py")


def _lotus(*args, timeout=240):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    return subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(300)
def test_repeats_run_apart_and_read_together(tmp_path):
    out = tmp_path / "reps"
    r = _lotus("run", "--repeat", "3", "--no-verdict", "-o", out, "--", sys.executable, TINY, "--item-ms", "2",
               "--step-ms", "2", "--items", "256", "--epochs", "3")
    assert r.returncode == 0, r.stderr
    runs = sorted(p.name for p in out.iterdir())
    assert runs == ["r1", "r2", "r3"]
    pids = {json.loads((out / k / "lotus-run.json").read_text())["pid"] for k in runs}
    assert len(pids) == 3  # each a process of its own
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("lotus run: repeat ")] == \
        [f"lotus run: repeat {k} of 3" for k in (1, 2, 3)]
    doc = json.loads(_lotus("analyze", "throughput", "-d", out, "--repeats", "--json").stdout)["repeats"]
    assert doc["runs"] == 3 and doc["names"] == runs
    assert f"lotus run: repeats (3 runs of one configuration): mean {doc['mean_samples_per_s']:,.1f}" in r.stderr
    assert f"lotus analyze throughput -d {out} --repeats" in r.stderr


@pytest.mark.timeout(120)
def test_repeat_needs_tracing_and_keeps_a_failed_run_s_exit_code(tmp_path):
    r = _lotus("run", "--repeat", "2", "--no-trace", "--", sys.executable, TINY)
    assert r.returncode == 2 and "--repeat compares the runs' traced rates" in r.stderr
    r = _lotus("run", "--repeat", "2", "--no-verdict", "-o", tmp_path / "f", "--", sys.executable, "-c",
               "import sys; sys.exit(5)")
    assert r.returncode == 5 and sorted(p.name for p in (tmp_path / "f").iterdir()) == ["r1", "r2"]
    assert "fewer than two with a rate, nothing to compare" in r.stderr and "Traceback" not in r.stderr
