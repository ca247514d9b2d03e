"""Helpers of the lotus submit tests: a tiny traced job, CSV writing, the CLI."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lotus.cli import cli

HERE = Path(__file__).resolve().parent
TINY = HERE / "tiny_job.py"
HEADER = "arch,depth,batch,workers,output_folder,port,submit_interval,cuda_device"


def tiny(*args) -> str:
    """The `command` cell running the tiny job with this interpreter."""
    return shlex.join([sys.executable, str(TINY), *map(str, args)])


def write_csv(path: Path, header: str, *rows: str) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def lotus(*args):
    """``lotus ARGS`` through CliRunner (stderr apart from stdout)."""
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps them apart anyway
        runner = CliRunner()
    result = runner.invoke(cli, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def lotus_subprocess(*args, cwd=None, timeout=240, **kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    return subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], cwd=cwd, env=env, check=False,
                          capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "out"
