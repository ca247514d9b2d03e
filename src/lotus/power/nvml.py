"""Read-only NVML: which GPU, what it supports, MPS presence, and a sampler of power, clocks and energy.

Nothing here sets anything: no clocks, power limits, compute mode or MPS. The NVML module is
``pynvml`` (nvidia-ml-py) unless a test injects a fake object with the same functions.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus.errors import LotusError

_log = logging.getLogger("lotus.power")
_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


class NoGPU(LotusError):
    """No NVIDIA GPU or no NVML: measuring is impossible here (analysis of tables still works)."""


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    compute_mode: str
    power_limit_w: float | None
    power_limit_range_w: tuple[float, float] | None
    supported_sm_clocks_mhz: tuple[int, ...] = field(default=())


def load_nvml(nvml=None):
    """``pynvml`` initialised, or NoGPU (one line)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise NoGPU("no NVML here (pip install nvidia-ml-py): lotus power bench needs an NVIDIA GPU; "
                        "lotus power predict/plan work on existing tables") from None
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:
        raise NoGPU(f"no NVIDIA GPU or driver here (NVML: {exc}): lotus power bench needs one; "
                    "lotus power predict/plan work on existing tables") from None
    if count < 1:
        raise NoGPU("NVML sees no GPU: lotus power bench needs one")
    return nvml


def pick_gpu(nvml, index: int | None = None):
    """(NVML index, handle): ``index``, else the first entry of CUDA_VISIBLE_DEVICES (an NVML index
    or a UUID), else 0."""
    if index is None:
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if first.startswith(("GPU-", "MIG-")):
            h = nvml.nvmlDeviceGetHandleByUUID(first)
            return int(nvml.nvmlDeviceGetIndex(h)), h
        index = int(first) if first.isdigit() else 0
    try:
        return index, nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        raise NoGPU(f"no GPU with NVML index {index} ({exc})") from None


def _safe(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:
        return default


def gpu_info(nvml, index: int, handle) -> GpuInfo:
    """What the GPU is and supports (read-only queries; a query it refuses is left empty)."""
    limit = _safe(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    rng = _safe(nvml.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    clocks: set[int] = set()
    mems = _safe(nvml.nvmlDeviceGetSupportedMemoryClocks, handle, default=[]) or []
    if mems:
        clocks.update(int(c) for c in _safe(nvml.nvmlDeviceGetSupportedGraphicsClocks, handle, max(mems),
                                            default=[]) or [])
    mode = _safe(nvml.nvmlDeviceGetComputeMode, handle)
    return GpuInfo(index=index, uuid=_text(_safe(nvml.nvmlDeviceGetUUID, handle, default="")),
                   name=_text(_safe(nvml.nvmlDeviceGetName, handle, default="")),
                   compute_mode=_COMPUTE_MODES.get(mode, "unknown") if mode is not None else "unknown",
                   power_limit_w=limit / 1e3 if limit else None,
                   power_limit_range_w=(rng[0] / 1e3, rng[1] / 1e3) if rng else None,
                   supported_sm_clocks_mhz=tuple(sorted(clocks)))


def mps_status(proc: str | os.PathLike = "/proc") -> dict:
    """Whether an MPS control daemon is active for this user (read-only: its pipe, its process)."""
    pipe_dir = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    pipe = (pipe_dir / "control").exists()
    daemon = None
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        entries = []
    for pid in entries:
        try:
            cmd = Path(proc, pid, "cmdline").read_bytes().split(b"\0")[0]
            if not cmd.endswith(b"nvidia-cuda-mps-control"):
                continue
            status = Path(proc, pid, "status").read_text()
        except OSError:
            continue
        owner = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), None)
        if uid is None or owner in (uid, 0):
            daemon = int(pid)
            break
    pct = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    return {"mps": bool(pipe or daemon), "pipe_directory": str(pipe_dir), "pipe": pipe, "daemon_pid": daemon,
            "active_thread_percentage": float(pct) if pct and pct.replace(".", "", 1).isdigit() else None}


class NvmlSampler(threading.Thread):
    """Samples utilisation, SM and memory clocks, power and the energy counter every ``interval_s``
    (monotonic and wall-clock time of each sample). Read-only."""

    def __init__(self, nvml, handle, interval_s: float = 0.075):
        super().__init__(name="lotus-power-nvml", daemon=True)
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.mono: list[float] = []
        self.wall: list[float] = []
        self.rows: list[tuple[float, float, float, float, float]] = []  # util %, sm MHz, mem MHz, W, J
        self.error: str | None = None

    def sample(self) -> None:
        nv, h = self.nvml, self.handle
        util = nv.nvmlDeviceGetUtilizationRates(h).gpu
        sm = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        mem = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        power = _safe(nv.nvmlDeviceGetPowerUsage, h)
        energy = _safe(nv.nvmlDeviceGetTotalEnergyConsumption, h)
        row = (float(util), float(sm), float(mem), power / 1e3 if power is not None else math.nan,
               energy / 1e3 if energy is not None else math.nan)
        with self._lock:
            self.mono.append(time.monotonic())
            self.wall.append(time.time())
            self.rows.append(row)

    def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                _log.warning("NVML sampling stopped: %s", self.error)
                return
            if self._done.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(timeout=2)

    def window(self, t0: float, t1: float, clock: str = "mono", wait: bool = False) -> dict:
        """Means over the samples in [t0, t1] (monotonic seconds, or wall with clock='wall'); energy
        from the counter interpolated at both ends, else from mean power x duration. ``wait``: first
        wait (up to a second) for a sample after ``t1``."""
        import numpy as np

        deadline = time.monotonic() + 1.0
        while wait and self.is_alive() and time.monotonic() < deadline:
            with self._lock:
                last = (self.mono if clock == "mono" else self.wall)[-1:] or [-math.inf]
            if last[0] >= t1:
                break
            time.sleep(self.interval_s / 4)

        with self._lock:
            t = np.asarray(self.mono if clock == "mono" else self.wall, dtype=float)
            rows = np.asarray(self.rows, dtype=float).reshape(-1, 5)
        dur = t1 - t0
        lo, hi = bisect.bisect_left(t.tolist(), t0), bisect.bisect_right(t.tolist(), t1)
        sel = rows[lo:hi]
        out = {"nvml_samples": len(sel), "duration_s": dur, "gpu_util_pct": math.nan, "sm_clock_mhz": math.nan,
               "mem_clock_mhz": math.nan, "power_w": math.nan, "energy_j": math.nan}
        if len(sel) == 0:
            return out
        mean = [float(c[np.isfinite(c)].mean()) if np.isfinite(c).any() else math.nan for c in sel.T]
        out.update(gpu_util_pct=mean[0], sm_clock_mhz=mean[1], mem_clock_mhz=mean[2])
        power_sampled = mean[3]
        e = rows[:, 4]
        ok = np.isfinite(e)
        if ok.sum() >= 2 and t[ok][0] <= t0 + self.interval_s * 2 and t[ok][-1] >= t1 - self.interval_s * 2:
            energy = float(np.interp(t1, t[ok], e[ok]) - np.interp(t0, t[ok], e[ok]))
            out.update(energy_j=energy, power_w=energy / dur if dur > 0 else math.nan)
        elif math.isfinite(power_sampled):
            out.update(energy_j=power_sampled * dur, power_w=power_sampled)
        out["power_sampled_w"] = power_sampled
        return out


@dataclass
class GpuContext:
    """The GPU measured: NVML module, handle, what it is, and the running sampler (None on a dry run)."""

    nvml: object
    handle: object
    info: GpuInfo
    sampler: NvmlSampler


def open_gpu(spec, nvml=None) -> GpuContext | None:
    """Start sampling the GPU of a BenchSpec (read-only); None for a CPU dry run (unless a test injects
    ``nvml``); NoGPU without one."""
    if spec.device == "cpu" and nvml is None:
        return None
    nv = load_nvml(nvml)
    index, handle = pick_gpu(nv, spec.gpu_index)
    sampler = NvmlSampler(nv, handle, spec.interval_s)
    sampler.start()
    return GpuContext(nv, handle, gpu_info(nv, index, handle), sampler)


def gpu_doc(gpu: GpuContext) -> dict:
    """What NVML said of the GPU, and MPS presence, as a plain dict (the bench's sidecar)."""
    from dataclasses import asdict

    return {**asdict(gpu.info), "mps": mps_status()}
