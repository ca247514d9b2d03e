"""lotus.launch.options: CPU lists, names, the job's environment."""

from __future__ import annotations

import pytest

from lotus.launch.options import (
    LaunchOptions,
    boot_dir,
    default_trace_dir,
    format_cpus,
    job_env,
    parse_cpus,
    script_name,
)


def test_cpu_lists_round_trip():
    assert parse_cpus("0-3,8, 10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpus([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert parse_cpus("5") == [5]
    for bad in ("", "a", "3-1", "1--2", "-1"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


@pytest.mark.parametrize(("command", "name"), [
    (["python", "train.py", "--lr", "1"], "train"),
    (["python3.11", "-u", "scripts/fit.py"], "fit"),
    (["python", "-m", "pkg.trainer", "x"], "trainer"),
    (["torchrun", "--nproc-per-node", "2", "train_ddp.py"], "train_ddp"),
    (["/opt/bin/my-train", "--x"], "my-train"),
])
def test_script_names(command, name):
    assert script_name(command) == name


def test_default_trace_dir_is_new_each_time(tmp_path):
    a = default_trace_dir(["python", "t.py"], tmp_path)
    a.mkdir(parents=True)
    b = default_trace_dir(["python", "t.py"], tmp_path)
    assert a.parent == b.parent == tmp_path and a != b and a.name.startswith("t-")


def test_job_env(tmp_path):
    base = {"PYTHONPATH": "/x", "LOTUS_STEPS": "9", "PATH": "/bin"}
    env = job_env(LaunchOptions(workers=3, steps=5, cpus=[0, 1], itt=True), tmp_path, base)
    assert env["PYTHONPATH"] == f"{boot_dir()}:/x"
    assert env["LOTUS_LAUNCH"] == "1" and env["LOTUS_WORKERS"] == "3" and env["LOTUS_STEPS"] == "5"
    assert env["LOTUS_TRACE_DIR"] == str(tmp_path.resolve()) and env["LOTUS_ITT"] == "1"
    assert env["OMP_NUM_THREADS"] == "2"
    untraced = job_env(LaunchOptions(trace=False), tmp_path, {"OMP_NUM_THREADS": "7"})
    assert "LOTUS_TRACE_DIR" not in untraced and "LOTUS_STEPS" not in untraced
    assert untraced["OMP_NUM_THREADS"] == "7"


def test_detail_settings_reach_the_job_environment(tmp_path):
    env = job_env(LaunchOptions(detail_budget_pct=2.5, full_detail=True), tmp_path, base={})
    assert env["LOTUS_DETAIL_BUDGET_PCT"] == "2.5" and env["LOTUS_DETAIL"] == "full"
    env = job_env(LaunchOptions(), tmp_path, base={})
    assert "LOTUS_DETAIL" not in env and "LOTUS_DETAIL_BUDGET_PCT" not in env


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan", "inf"])
def test_a_bad_detail_budget_is_one_line_and_exit_2(bad):
    from click.testing import CliRunner

    from lotus.cli import cli

    res = CliRunner().invoke(cli, ["run", "--detail-budget", bad, "--", "true"])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and "--detail-budget" in res.output
