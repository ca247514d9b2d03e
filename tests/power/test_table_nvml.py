"""Table validation (one line naming the file and the column) and the NVML boundary (a fake nvml)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

from lotus.errors import InputError
from lotus.power import nvml as N
from lotus.power.table import fit_models, read_table, write_table


def test_missing_column_names_the_file_and_the_column(tmp_path, table):
    path = tmp_path / "t.csv"
    table.drop(columns="sm_clock_mhz").to_csv(path, index=False)
    with pytest.raises(InputError) as exc:
        read_table(path)
    assert str(exc.value).startswith(f"{path}: missing column 'sm_clock_mhz'")
    assert "\n" not in str(exc.value)


def test_non_number_names_the_line(tmp_path, table):
    path = tmp_path / "t.csv"
    table.astype({"batch": object}).assign(batch=["x", *table["batch"][1:]]).to_csv(path, index=False)
    with pytest.raises(InputError, match=rf"{path}:2: column 'batch' holds a non-number"):
        read_table(path)


def test_missing_file_and_garbage(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_table(tmp_path / "nope.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"bad\.parquet: not a CSV/Parquet table"):
        read_table(bad)


def test_write_read_round_trip_and_fit_models(tmp_path, table):
    for name in ("t.csv", "t.parquet"):
        path = write_table(table, tmp_path / name)
        df = read_table(path)
        assert list(df.columns[:3]) == ["model", "batch", "tenants"] and len(df) == len(table)
    ts, ms = fit_models(df, None, path)
    assert ts is not None and ms is None
    with pytest.raises(InputError, match="no usable rows for model 'other'"):
        fit_models(df, "other", path)


class FakeNvml:
    """The pynvml functions lotus calls, read-only, with a settable power and an energy counter."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    class NVMLError(Exception):
        pass

    def __init__(self, energy: bool = True, count: int = 1, fail_init: bool = False):
        self.energy, self.count, self.fail_init = energy, count, fail_init
        self.t0 = time.monotonic()
        self.calls: list[str] = []

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        if i >= self.count:
            raise self.NVMLError("Invalid Argument")
        return ("h", i)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=80, memory=30)

    def nvmlDeviceGetClockInfo(self, h, which):
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, h):
        return 300_000  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy:
            raise self.NVMLError("Not Supported")
        return int((time.monotonic() - self.t0) * 300_000)  # mJ at 300 W

    def nvmlDeviceGetName(self, h):
        return b"Fake H100"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1234"

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return (200_000, 700_000)

    def nvmlDeviceGetSupportedMemoryClocks(self, h):
        return [2619, 1593]

    def nvmlDeviceGetSupportedGraphicsClocks(self, h, mem):
        return [1980, 1410, 1005] if mem == 2619 else [1005]

    def nvmlDeviceGetComputeMode(self, h):
        return 0


@pytest.mark.parametrize("energy", [True, False])
def test_sampler_window_means_and_energy(energy):
    nv = FakeNvml(energy=energy)
    s = N.NvmlSampler(nv, ("h", 0), interval_s=0.01)
    s.start()
    time.sleep(0.15)
    t0 = time.monotonic()
    time.sleep(0.3)
    t1 = time.monotonic()
    time.sleep(0.05)
    s.stop()
    w = s.window(t0, t1)
    assert w["nvml_samples"] >= 10 and w["sm_clock_mhz"] == 1980 and w["mem_clock_mhz"] == 2619
    assert w["gpu_util_pct"] == 80 and w["power_w"] == pytest.approx(300, rel=0.05)
    assert w["energy_j"] == pytest.approx(300 * (t1 - t0), rel=0.05)
    empty = s.window(t1 + 100, t1 + 101)
    assert empty["nvml_samples"] == 0 and math.isnan(empty["power_w"])


def test_load_nvml_without_gpu_is_one_line():
    with pytest.raises(N.NoGPU, match=r"no NVIDIA GPU or driver here .*Driver Not Loaded"):
        N.load_nvml(FakeNvml(fail_init=True))
    with pytest.raises(N.NoGPU, match="sees no GPU"):
        N.load_nvml(FakeNvml(count=0))
    with pytest.raises(N.NoGPU, match="no GPU with NVML index 3"):
        N.pick_gpu(FakeNvml(), 3)


def test_gpu_info_is_read_only_queries(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nv = FakeNvml()
    idx, h = N.pick_gpu(nv)
    info = N.gpu_info(nv, idx, h)
    assert info.name == "Fake H100" and info.uuid == "GPU-1234" and info.compute_mode == "Default"
    assert info.power_limit_w == 700 and info.power_limit_range_w == (200, 700)
    assert info.supported_sm_clocks_mhz == (1005, 1410, 1980)
    assert not [m for m in dir(nv) if m.startswith("nvmlDeviceSet")]  # nothing to set, and lotus calls no setter


def test_mps_status_reads_the_pipe_and_proc(tmp_path, monkeypatch):
    pipe = tmp_path / "mps"
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raising=False)
    proc = tmp_path / "proc"
    proc.mkdir()
    assert N.mps_status(proc)["mps"] is False
    (proc / "42").mkdir()
    (proc / "42" / "cmdline").write_bytes(b"/usr/bin/nvidia-cuda-mps-control\0-d\0")
    import os

    (proc / "42" / "status").write_text(f"Name:\tnvidia-cuda-mps\nUid:\t{os.getuid()}\t0\t0\t0\n")
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    st = N.mps_status(proc)
    assert st["mps"] is True and st["daemon_pid"] == 42 and st["active_thread_percentage"] == 25.0
