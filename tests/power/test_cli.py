"""`lotus power predict/plan/fit/bench` through click's CliRunner: JSON, one-line errors, exit codes."""

from __future__ import annotations

import json
import sys

from tests.cli.conftest import run
from tests.power.conftest import make_table
from tests.power.test_table_nvml import FakeNvml


def test_predict_json(table_csv):
    res = run("power", "predict", "--table", table_csv, "--batch", "32,64", "--tenants", "2", "--clock", "1410",
              "--json")
    doc = json.loads(res.output)
    assert [p["batch"] for p in doc["predictions"]] == [32, 64]
    p = doc["predictions"][0]
    assert p["tenants"] == 2 and p["clock_mhz"] == 1410 and p["samples_per_s"] > 0 and p["power_w"] > 0
    assert p["energy_j_per_sample"] == p["power_w"] / p["samples_per_s"]
    assert doc["fit"]["model"] == "toynet" and doc["fit"]["clock_fitted"] is True


def test_predict_text_and_fit(table_csv):
    res = run("power", "predict", "--table", table_csv, "--batch", "8")
    assert res.output.startswith("toynet batch 8 x 1 (time-sliced, share 100%) at ")
    assert "fit: 72 rows, throughput error median" in res.output
    res = run("power", "fit", "--table", table_csv, "--json")
    doc = json.loads(res.output)
    assert doc["time_sliced"]["throughput"]["host_ms"] > 0 and doc["mps"] is None


def test_plan_json_respects_the_cap(table_csv):
    res = run("power", "plan", "--table", table_csv, "--power-cap", "250", "--clocks", "1005,1410,1755,1980",
              "--json")
    doc = json.loads(res.output)
    assert doc["feasible"] is True and doc["best"]["power_w"] <= 250 and doc["clocks_from"] == "--clocks"
    assert doc["commands"][0] == "sudo nvidia-smi -i 0 -pl 250"
    assert doc["measured"]["gpu_idle_from_data_share"] == 0.02


def test_plan_text_and_infeasible_cap(table_csv):
    res = run("power", "plan", "--table", table_csv, "--power-cap", "300", "--sharing", "time-sliced")
    assert res.output.startswith("plan for toynet under 300 W")
    assert "commands a privileged user would run" in res.output and "time-sliced" in res.output
    res = run("power", "plan", "--table", table_csv, "--power-cap", "5")
    assert res.output.startswith("no plan for toynet under 5 W: the lowest-power configuration instead")
    assert "note: no configuration is predicted under 5 W; the lowest predicted power is" in res.output


def test_missing_column_is_one_line_exit_1(tmp_path):
    path = tmp_path / "bad.csv"
    make_table().drop(columns="power_w").to_csv(path, index=False)
    for cmd in (["predict", "--batch", "8"], ["plan", "--power-cap", "100"], ["fit"]):
        res = run("power", *cmd, "--table", path, ok=False)
        assert res.exit_code == 1
        assert res.stderr.strip() == f"lotus: error: {path}: missing column 'power_w' (mean board power over the " \
                                     "window (energy counter / time; else mean of samples))"


def test_several_models_need_m(tmp_path):
    path = tmp_path / "two.csv"
    t = make_table(clocks=(1500,))
    t.assign(model=["a", "b"] * (len(t) // 2)).to_csv(path, index=False)
    res = run("power", "plan", "--table", path, "--power-cap", "100", ok=False)
    assert res.exit_code == 1 and "holds 2 models (a, b): choose one with -m" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bench_without_gpu_is_one_line_exit_1(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    res = run("power", "bench", "-m", "resnet18", "--workdir", tmp_path / "w", ok=False)
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lotus: error: no NVIDIA GPU or driver here")
    assert "predict/plan work on existing tables" in lines[0]
    assert not (tmp_path / "w").exists()  # nothing generated, nothing launched
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    res = run("power", "bench", ok=False)
    assert res.exit_code == 1 and "no NVML here (pip install nvidia-ml-py)" in res.stderr


def test_mps_percentage_needs_a_running_daemon(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
    monkeypatch.setattr("lotus.power.nvml.mps_status", lambda proc="/proc": {"mps": False})
    res = run("power", "bench", "--mps-percentage", "50", ok=False)
    assert res.exit_code == 1 and "lotus never starts one" in res.stderr


def test_usage_errors_exit_2(table_csv):
    res = run("power", "predict", "--table", table_csv, "--batch", "0", ok=False)
    assert res.exit_code == 2
    res = run("power", "plan", "--table", table_csv, ok=False)
    assert res.exit_code == 2 and "--power-cap" in res.stderr


def test_power_help_imports_nothing_heavy():
    import subprocess

    code = ("import sys\nfrom click.testing import CliRunner\nfrom lotus.cli import cli\n"
            "for args in (['power', '--help'], ['power', 'plan', '--help'], ['power', 'bench', '--help']):\n"
            "    r = CliRunner().invoke(cli, args)\n    assert r.exit_code == 0, r.output\n"
            "heavy = [m for m in ('torch', 'pandas', 'numpy', 'matplotlib', 'pynvml') if m in sys.modules]\n"
            "assert not heavy, heavy\nprint(r.output)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "--power-cap" not in out.stdout and "-- COMMAND" in out.stdout
