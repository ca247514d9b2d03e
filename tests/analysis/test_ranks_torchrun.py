"""`lotus analyze ranks` on real torchrun jobs (DDP over gloo on this machine's CPUs, 2 ranks, 2 workers each):
one rank given a slow input pipeline, or a slow step; lotus must name that rank and its cause (issue 26)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parent / "jobs" / "ddp_straggler.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")


def lotus(*args, timeout=240):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    return subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("slow_rank", "slow", "cause"), [(1, "input", "input pipeline"), (0, "step", "step")])
def test_torchrun_straggler_is_named(tmp_path, slow_rank, slow, cause):
    if not TORCHRUN.exists():
        pytest.skip("torchrun not installed beside this Python")
    r = lotus("run", "-o", tmp_path / "t", "--", TORCHRUN, "--standalone", "--nproc-per-node", 2, JOB,
              "--slow-rank", slow_rank, "--slow", slow)
    assert r.returncode == 0, r.stderr
    out = lotus("analyze", "ranks", "-d", tmp_path / "t", "--json")
    assert out.returncode == 0, out.stderr
    (rep,) = json.loads(out.stdout)["configs"].values()
    assert rep["collective"]["lockstep"]  # DDP's all-reduce in every step
    s = rep["straggler"]
    assert s is not None, rep["collective"]
    assert (s["rank"], s["cause"]) == (slow_rank, cause)
    text = lotus("analyze", "ranks", "-d", tmp_path / "t").stdout
    assert f"rank {slow_rank}" in text and f"cause: its {cause}" in text
