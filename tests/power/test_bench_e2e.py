"""The tenant module and the bench pipeline end to end on the CPU (tiny model, tiny images, no GPU)."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest

from lotus.power.bench import BenchSpec, run_bench
from tests.cli.conftest import run
from tests.power.test_table_nvml import FakeNvml


def _spec(tmp_path, **kw):
    base = dict(model="resnet18", batches=(4,), tenants=(2,), seconds=3.0, images=32, image_size=32,
                device="cpu", workdir=tmp_path / "work", warmup_s=0.3, ready_timeout_s=120)
    return BenchSpec(**{**base, **kw})


@pytest.mark.timeout(180)
def test_two_cpu_tenants_measured_together_with_a_fake_nvml(tmp_path):
    """Two tenants through lotus.launch, lockstep windows, traces analysed, NVML (fake) over the window."""
    seen, gpus = [], []
    df = run_bench(_spec(tmp_path, batches=(2, 4)), nvml=FakeNvml(), on_row=seen.append, on_gpu=gpus.append)
    assert len(df) == 2 and len(seen) == 2 and gpus[0]["name"] == "Fake H100"
    assert (df["error"] == "").all(), df["error"].tolist()
    r = df.iloc[1].to_dict()
    assert r["model"] == "resnet18" and r["tenants"] == 2 and r["share"] == 0.5 and r["sharing"] == "time-sliced"
    assert r["samples_per_s"] > 0 and 0 < r["latency_p50_ms"] <= r["latency_p99_ms"]
    assert r["duration_s"] == pytest.approx(3.0) and r["nvml_samples"] > 10
    assert r["power_w"] == pytest.approx(300, rel=0.05) and r["sm_clock_mhz"] == 1980
    assert r["energy_j_per_sample"] == pytest.approx(r["power_w"] / r["samples_per_s"], rel=0.05)
    assert 0 <= r["gpu_idle_from_data_share"] < 1 and r["gpu_name"] == "Fake H100"
    assert r["clock_mode"] == "default" and r["data"] == "cached" and r["device"] == "cpu"
    group = tmp_path / "work" / "resnet18-t2"
    for tid in (0, 1):
        res = json.loads((group / f"tenant-{tid}.json").read_text())
        assert [p["batch"] for p in res["points"]] == [2, 4] and res["fatal"] is None
        assert any(p.name.endswith(".lotustrace") for p in (group / f"tenant-{tid}").iterdir())


@pytest.mark.timeout(180)
def test_a_failing_point_is_recorded_and_the_bench_goes_on(tmp_path):
    df = run_bench(_spec(tmp_path, model="no_such_model", tenants=(1,), batches=(2, 4)))
    assert len(df) == 2 and df["error"].str.contains("no_such_model|Unknown model", regex=True).all()
    assert df["samples_per_s"].isna().all() if "samples_per_s" in df else True


@pytest.mark.timeout(180)
def test_cli_bench_cpu_writes_the_table(tmp_path):
    out = tmp_path / "t.csv"
    res = run("power", "bench", "--cpu", "-m", "resnet18", "--batch", "4", "--tenants", "1", "--seconds", "2",
              "--images", "16", "--image-size", "32", "--workdir", tmp_path / "w", "--out", out)
    assert "resnet18 batch 4 x 1 tenant(s):" in res.output and "1 point(s) measured, 0 failed" in res.output
    import pandas as pd

    df = pd.read_csv(out)
    assert df.loc[0, "samples_per_s"] > 0 and math.isnan(df.loc[0, "power_w"])


@pytest.mark.timeout(180)
def test_cli_bench_of_a_command(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        ds = TensorDataset(torch.randn(256, 8))
        for (x,) in DataLoader(ds, batch_size=16):
            torch.nn.functional.linear(x, torch.randn(4, 8)).sum()
    """))
    out = tmp_path / "cmd.csv"
    res = run("power", "bench", "--cpu", "--tenants", "1,2", "--workdir", tmp_path / "w", "--out", out,
              "--", sys.executable, script)
    assert "infer batch 16 x 2 tenant(s):" in res.output, res.output + res.stderr
    import pandas as pd

    df = pd.read_csv(out)
    assert list(df["tenants"]) == [1, 2] and (df["samples_per_s"] > 0).all() and (df["batch"] == 16).all()
