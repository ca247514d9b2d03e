"""``lotus power bench``: inference throughput, latency, power and energy over batch sizes x tenants.

For each tenant count the bench starts that many tenants (:mod:`lotus.power.tenant`) through
:func:`lotus.launch.launch`, one thread each, and leads them through the batch sizes in lockstep: when
every tenant is ready for a point it writes the measured window (monotonic seconds) to a go file, the
tenants run over it, and the NVML sampler of this process (read-only) gives power, energy, clocks and
utilisation over the same window. A point that fails (a tenant's error, out of memory) keeps its row
with the reason in ``error``; a tenant that dies ends its group, and the next group starts afresh.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lotus._cpus import count as cpu_count
from lotus.power.nvml import GpuContext, gpu_doc, open_gpu

__all__ = ["BenchSpec", "GpuContext", "open_gpu", "run_bench", "run_group"]

_log = logging.getLogger("lotus.power")


@dataclass
class BenchSpec:
    model: str = "resnet50"
    batches: tuple[int, ...] = (1, 8, 32, 128)
    tenants: tuple[int, ...] = (1, 2, 4)
    seconds: float = 10.0  # measured window per point
    images: int = 256  # generated JPEGs
    image_size: int = 224  # crop side (pixels)
    data_mode: str = "cached"  # "cached": decoded once; "jpeg": decoded every batch
    workers: int | None = None  # DataLoader workers per tenant (None: by data mode)
    amp: str = "off"
    channels_last: bool = False
    device: str = "cuda"  # "cpu": dry run without a GPU (no NVML: power columns empty)
    gpu_index: int | None = None  # NVML index (default: CUDA_VISIBLE_DEVICES' first, else 0)
    workdir: Path = Path("lotus-runs/power")
    warmup_s: float = 2.0
    interval_s: float = 0.075  # NVML sampling period
    clock_label: str = "default"
    mps_percentage: float | None = None  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per tenant (MPS already running)
    ready_timeout_s: float = 300.0  # longest wait for the tenants to be ready for a point
    lead_s: float = 0.5  # go signal -> window start


def prepare_data(spec: BenchSpec) -> Path:
    """The generated JPEG ImageFolder (kept between runs when the spec is unchanged)."""
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    short = max(spec.image_size + 8, round(spec.image_size * 1.34))
    ds = DatasetSpec(images=spec.images, min_short_px=short, max_short_px=max(short, round(spec.image_size * 2.2)))
    cpus = cpu_count()
    return generate_image_folder(Path(spec.workdir) / f"data-{spec.image_size}px-{spec.images}", ds,
                                 workers=min(8, cpus))


def _workers(spec: BenchSpec, tenants: int) -> int:
    if spec.workers is not None:
        return spec.workers
    if spec.data_mode == "jpeg":
        cpus = cpu_count()
        return max(1, cpus // tenants - 1)
    return 2 if spec.device == "cuda" else 1


def tenant_command(spec: BenchSpec, data: Path, group: Path, tenants: int, tid: int, batches) -> list[str]:
    cmd = [sys.executable, "-m", "lotus.power.tenant", "--model", spec.model,
           "--batch", ",".join(str(b) for b in batches), "--seconds", str(spec.seconds), "--data", str(data),
           "--sync", str(group / "sync"), "--tenant", str(tid), "--result", str(group / f"tenant-{tid}.json"),
           "--device", spec.device, "--amp", spec.amp, "--data-mode", spec.data_mode,
           "--workers", str(_workers(spec, tenants)), "--image-size", str(spec.image_size),
           "--images", str(spec.images), "--warmup-s", str(spec.warmup_s),
           "--wait-s", str(spec.ready_timeout_s + spec.seconds + 60)]
    if spec.channels_last:
        cmd.append("--channels-last")
    if spec.device == "cpu":  # torch threads: the CPUs left by the loader workers, shared by the tenants
        cpus = cpu_count()
        cmd += ["--threads", str(max(1, (cpus - tenants * _workers(spec, tenants)) // tenants))]
    return cmd


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class _Group:
    """The tenants of one tenant count, and the lockstep protocol with them."""

    def __init__(self, spec: BenchSpec, gpu: GpuContext | None, data: Path, tenants: int, batches):
        from lotus.launch import LaunchOptions, launch

        self.spec, self.n, self.batches = spec, tenants, list(batches)
        self.dir = Path(spec.workdir) / f"{spec.model}-t{tenants}"
        self.sync = self.dir / "sync"
        self.sync.mkdir(parents=True, exist_ok=True)
        for old in list(self.sync.glob("*.json")) + list(self.dir.glob("tenant-*.json")):
            old.unlink()
        for old in self.dir.glob("tenant-*"):  # an earlier run's traces: this run's must stand alone
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        env = {"PYTHONUNBUFFERED": "1"}
        if gpu is not None and gpu.info.uuid:
            env["CUDA_VISIBLE_DEVICES"] = gpu.info.uuid
        if spec.mps_percentage is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = f"{spec.mps_percentage:g}"
        budget = spec.ready_timeout_s + len(self.batches) * (spec.seconds + spec.warmup_s + 120)
        self.probes: dict[int, object] = {}
        self.threads = []
        for tid in range(tenants):
            cmd = tenant_command(spec, data, self.dir, tenants, tid, self.batches)
            opts = LaunchOptions(trace_dir=self.dir / f"tenant-{tid}", capture=True, timeout_s=budget, env=env)

            def run(tid=tid, cmd=cmd, opts=opts):
                self.probes[tid] = launch(cmd, opts)

            t = threading.Thread(target=run, name=f"lotus-power-tenant-{tid}", daemon=True)
            t.start()
            self.threads.append(t)

    def dead(self) -> str | None:
        for tid, t in enumerate(self.threads):
            if not t.is_alive():
                probe = self.probes.get(tid)
                res = _read(self.dir / f"tenant-{tid}.json") or {}
                why = res.get("fatal")
                if not why and probe is not None:
                    why = (probe.stderr_tail(600).strip().splitlines() or [""])[-1]
                return f"tenant {tid} exited (code {getattr(probe, 'exit_code', '?')}): {why}"[:400]
        return None

    def wait_ready(self, k: int) -> dict | str:
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while True:
            docs = {tid: _read(self.sync / f"ready-{k}-{tid}.json") for tid in range(self.n)}
            if all(d is not None for d in docs.values()):
                return docs
            dead = self.dead()
            if dead:
                return dead
            if time.monotonic() > deadline:
                return f"tenants not ready within {self.spec.ready_timeout_s:.0f} s"
            time.sleep(0.02)

    def go(self, k: int, doc: dict) -> None:
        tmp = self.sync / f".go-{k}.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.sync / f"go-{k}.json")

    def wait_points(self, k: int, timeout_s: float) -> list[dict] | str:
        deadline = time.monotonic() + timeout_s
        while True:
            docs = [_read(self.dir / f"tenant-{tid}.json") or {} for tid in range(self.n)]
            if all(len(d.get("points", ())) > k for d in docs):
                return [d["points"][k] for d in docs]
            dead = self.dead()
            if dead or time.monotonic() > deadline:
                return dead or f"tenant results for point {k} not written within {timeout_s:.0f} s"
            time.sleep(0.05)

    def abort(self, reason: str, start: int = 0) -> None:
        for k in range(start, len(self.batches)):
            self.go(k, {"abort": reason})
        for t in self.threads:
            t.join(timeout=30)


def base_row(spec: BenchSpec, gpu: GpuContext | None, tenants: int, batch: int) -> dict:
    from lotus.power.nvml import mps_status

    mps = mps_status()["mps"] if gpu is not None else False
    share = spec.mps_percentage / 100 if (mps and spec.mps_percentage) else 1.0 / tenants
    return {"model": spec.model, "batch": batch, "tenants": tenants, "share": share, "mps": mps,
            "sharing": "mps" if mps else "time-sliced", "compute_mode": gpu.info.compute_mode if gpu else "",
            "clock_mode": spec.clock_label, "power_limit_w": gpu.info.power_limit_w if gpu else math.nan,
            "amp": spec.amp, "channels_last": spec.channels_last, "data": spec.data_mode, "device": spec.device,
            "host": socket.gethostname(), "gpu_name": gpu.info.name if gpu else "", "error": ""}


def measure_row(row: dict, points: list[dict], nv: dict) -> dict:
    """A point's row from the tenants' results and the NVML window (units in the keys)."""
    import numpy as np

    errors = [f"tenant {i}: {p['error']}" for i, p in enumerate(points) if p.get("error")]
    if errors:
        return {**row, "error": "; ".join(errors)[:500]}
    lat = np.concatenate([np.asarray(p.get("latencies_ms") or [], dtype=float) for p in points])
    x = float(sum(p["samples_per_s"] for p in points))
    samples = float(sum(p["samples"] for p in points))
    row = {**row, "samples_per_s": x,
           "latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else math.nan,
           "latency_p99_ms": float(np.percentile(lat, 99)) if len(lat) else math.nan,
           "data_wait_share": float(np.mean([p.get("data_wait_share", math.nan) for p in points]))}
    row.update({k: nv.get(k, math.nan) for k in ("power_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct",
                                                  "duration_s", "nvml_samples")})
    row["energy_j_per_sample"] = nv.get("energy_j", math.nan) / samples if samples > 0 else math.nan
    return row


def run_group(spec: BenchSpec, gpu: GpuContext | None, data: Path, tenants: int, batches,
              on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """One tenant count over ``batches``; a row per point, failures included."""
    group = _Group(spec, gpu, data, tenants, batches)
    rows: list[dict] = []
    windows: dict[int, tuple[float, float]] = {}

    def emit(row: dict) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    try:
        for k, b in enumerate(group.batches):
            row = base_row(spec, gpu, tenants, b)
            ready = group.wait_ready(k)
            if isinstance(ready, str):
                group.abort(ready, k)
                for bb in group.batches[k:]:
                    emit({**base_row(spec, gpu, tenants, bb), "error": ready})
                break
            bad = {tid: d.get("error") for tid, d in ready.items() if not d.get("ok")}
            if bad:
                group.go(k, {"skip": "another tenant failed"})
                emit({**row, "error": "; ".join(f"tenant {t}: {e}" for t, e in bad.items())[:500]})
                time.sleep(0.5)  # a tenant that cannot start exits now: end the group then
                dead = group.dead()
                if dead:
                    group.abort(dead, k + 1)
                    for bb in group.batches[k + 1:]:
                        emit({**base_row(spec, gpu, tenants, bb), "error": dead})
                    break
                continue
            t0 = time.monotonic() + spec.lead_s
            t1 = t0 + spec.seconds
            group.go(k, {"start_mono": t0, "end_mono": t1})
            time.sleep(max(0.0, t1 - time.monotonic()))
            points = group.wait_points(k, timeout_s=120)
            if isinstance(points, str):
                group.abort(points, k + 1)
                for bb in group.batches[k:]:
                    emit({**base_row(spec, gpu, tenants, bb), "error": points})
                break
            nv = gpu.sampler.window(t0, t1, wait=True) if gpu is not None else {"duration_s": t1 - t0}
            windows[len(rows)] = (t0, t1)
            emit(measure_row(row, points, nv))
    except BaseException:
        group.abort("the bench stopped")
        raise
    for t in group.threads:
        t.join(timeout=60)
    _fill_data_idle(group, rows, windows)
    return rows


def _fill_data_idle(group: _Group, rows: list[dict], windows: dict) -> None:
    """gpu_idle_from_data_share of each measured row from the tenants' traces (wait share without CUDA)."""
    from lotus.power.idle import data_idle_share, load_trace

    offset = time.time() - time.monotonic()
    traces = [load_trace(group.dir / f"tenant-{tid}") for tid in range(group.n)] if windows else []
    for i, (t0, t1) in windows.items():
        shares = [data_idle_share(tr, f"power-b{rows[i]['batch']}", (t0 + offset) * 1e9, (t1 + offset) * 1e9)
                  for tr in traces]
        ok = [s for s in shares if s is not None and math.isfinite(s)]
        rows[i]["gpu_idle_from_data_share"] = float(sum(ok) / len(ok)) if ok else rows[i].get("data_wait_share")


def run_bench(spec: BenchSpec, nvml=None, on_row: Callable[[dict], None] | None = None,
              on_gpu: Callable[[dict], None] | None = None):
    """All groups of ``spec``: a DataFrame, one row per point (see lotus.power.table.COLUMNS).
    ``on_gpu`` gets what NVML said of the GPU (name, supported clocks, power limits, MPS)."""
    import pandas as pd

    gpu = open_gpu(spec, nvml)
    if gpu is not None and on_gpu is not None:
        on_gpu(gpu_doc(gpu))
    try:
        data = prepare_data(spec)
        rows: list[dict] = []
        for n in spec.tenants:
            rows += run_group(spec, gpu, data, n, spec.batches, on_row)
    finally:
        if gpu is not None:
            gpu.sampler.stop()
    return pd.DataFrame(rows)
