"""``lotus power bench -- COMMAND``: power and energy of any traced command, alone or as several tenants.

For each tenant count, that many copies of the command start together through :func:`lotus.launch.launch`
(one thread each, their own trace directories) while this process samples NVML (read-only). The
throughput is the sum of the copies' :attr:`Probe.samples_per_s` (steady state of their main loader);
the measured window runs from the first to the last batch the copies consumed; latency is the time
between consecutive batches of the main loader; the batch size is the one that loader was given.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import replace
from pathlib import Path

_log = logging.getLogger("lotus.power")


def _steady(trace_dir: Path):
    """(batch size, consumed times ns of the main loader) from one copy's trace, or None."""
    from lotus.analysis.runs import load_config
    from lotus.analysis.throughput import throughput

    try:
        cfg = load_config(trace_dir)
    except Exception as exc:
        _log.info("no trace in %s: %s", trace_dir, exc)
        return None
    t = throughput(cfg.batches, cfg.loaders)
    if t["loader"] is None:
        return None
    b = cfg.batches
    b = b[(b["loader"] == t["loader"]) & b["consumed_ns"].notna()]
    sizes = [d.get("batch_size") for (_, lid), d in cfg.loaders.items() if lid == t["loader"]]
    return (sizes[0] if sizes else None), b["consumed_ns"].astype("float64").sort_values().to_numpy()


def run_command_group(command: list[str], spec, gpu, tenants: int, name: str, timeout_s: float | None = None) -> dict:
    """``tenants`` copies of ``command`` at once; one row (see lotus.power.table.COLUMNS)."""
    import numpy as np

    from lotus.launch import LaunchOptions, launch
    from lotus.power.bench import base_row
    from lotus.power.idle import data_idle_share

    group = Path(spec.workdir) / f"{name}-t{tenants}"
    env = {"CUDA_VISIBLE_DEVICES": gpu.info.uuid} if gpu is not None and gpu.info.uuid else {}
    if spec.mps_percentage is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = f"{spec.mps_percentage:g}"
    probes: dict[int, object] = {}
    errors: dict[int, str] = {}

    def run(tid: int) -> None:
        try:
            probes[tid] = launch(list(command), LaunchOptions(trace_dir=group / f"tenant-{tid}", capture=True,
                                                              timeout_s=timeout_s, env={**env}))
        except Exception as exc:
            errors[tid] = str(exc)

    threads = [threading.Thread(target=run, args=(tid,), daemon=True) for tid in range(tenants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row = base_row(replace(spec, model=name), gpu, tenants, 0)
    row["batch"] = math.nan
    for tid, p in probes.items():
        if p.exit_code != 0:
            tail = (p.stderr_tail(600).strip().splitlines() or [""])[-1]
            errors[tid] = f"exit code {p.exit_code}: {tail}"
    if errors:
        return {**row, "error": "; ".join(f"tenant {t}: {e}" for t, e in sorted(errors.items()))[:500]}
    steady = [_steady(group / f"tenant-{tid}") for tid in range(tenants)]
    if any(s is None or len(s[1]) < 2 for s in steady):
        return {**row, "error": "no steady batches in the traces (did the command use a DataLoader?)"}
    rates = [probes[tid].samples_per_s for tid in range(tenants)]
    x = float(sum(r for r in rates if r))
    t0 = min(s[1][0] for s in steady) / 1e9
    t1 = max(s[1][-1] for s in steady) / 1e9
    lat = np.concatenate([np.diff(s[1]) / 1e6 for s in steady])
    nv = gpu.sampler.window(t0, t1, clock="wall", wait=True) if gpu is not None else {"duration_s": t1 - t0}
    sizes = {s[0] for s in steady}
    shares = [data_idle_share(group / f"tenant-{tid}") for tid in range(tenants)]
    shares = [s for s in shares if s is not None]
    row.update(batch=sizes.pop() if len(sizes) == 1 else math.nan, samples_per_s=x,
               latency_p50_ms=float(np.percentile(lat, 50)), latency_p99_ms=float(np.percentile(lat, 99)),
               gpu_idle_from_data_share=float(np.mean(shares)) if shares else math.nan)
    row.update({k: nv.get(k, math.nan) for k in ("power_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct",
                                                  "duration_s", "nvml_samples")})
    energy = nv.get("energy_j", math.nan)
    row["energy_j_per_sample"] = energy / (x * (t1 - t0)) if x > 0 and t1 > t0 else math.nan
    return row


def run_command_bench(command: list[str], spec, name: str | None = None, nvml=None, timeout_s: float | None = None,
                      on_row=None, on_gpu=None):
    """Every tenant count of ``spec`` for ``command``: a DataFrame, one row each."""
    import pandas as pd

    from lotus.launch.options import script_name
    from lotus.power.nvml import gpu_doc, open_gpu

    name = name or script_name(command)
    gpu = open_gpu(spec, nvml)
    if gpu is not None and on_gpu is not None:
        on_gpu(gpu_doc(gpu))
    rows = []
    try:
        for n in spec.tenants:
            rows.append(run_command_group(command, spec, gpu, n, name, timeout_s))
            if on_row is not None:
                on_row(rows[-1])
    finally:
        if gpu is not None:
            gpu.sampler.stop()
    return pd.DataFrame(rows)
