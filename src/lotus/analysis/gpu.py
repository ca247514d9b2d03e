"""GPU idle time and its causes (pure functions over the events/batches DataFrames).

Sources, all optional:

* CUDA events of the traced DataLoader (``gpu_wait`` / ``gpu_step`` per batch): GPU idle while the
  training loop waited for data, and GPU time of the rest of each step.
* NVML telemetry (``gpu_util``, ``gpu_power``, ``gpu_energy``, clocks): utilisation, power, energy per sample.
* A torch.profiler (Kineto) trace of the same run: every GPU kernel/memcpy/memset, so total GPU idle in
  the profiled window, and an independent measure of the idle that overlaps the loop's waits, to
  cross-check the CUDA-event figure.

Without CUDA events the report says so and gives the host-side wait only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import numpy as np

from lotus.analysis.stats import prepared

_log = logging.getLogger("lotus.analysis")
GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_RANK_IN_NAME = re.compile(r"(?:^|[-_.])r(?:ank)?(\d+)(?:[-_.]|$)")


@dataclass(frozen=True)
class KinetoGPU:
    """Merged GPU busy intervals of one Kineto trace (wall-clock ns)."""

    rank: int
    start_ns: np.ndarray  # sorted, non-overlapping
    end_ns: np.ndarray
    events: int

    @property
    def window(self) -> tuple[int, int]:
        return (int(self.start_ns[0]), int(self.end_ns[-1])) if len(self.start_ns) else (0, 0)


def kineto_rank(doc: dict, name: str) -> int:
    info = doc.get("distributedInfo") or {}
    if isinstance(info, dict) and "rank" in info:
        return int(info["rank"])
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else 0


def kineto_gpu_busy(doc: dict, name: str = "") -> KinetoGPU:
    """GPU activity of a Kineto (Chrome JSON) trace as merged busy intervals on the wall clock."""
    base = int(doc.get("baseTimeNanoseconds", 0))
    starts, ends = [], []
    for e in doc.get("traceEvents", ()):
        if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITY_CATS:
            try:
                ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
            except (KeyError, TypeError, ValueError):
                continue
            starts.append(ts)
            ends.append(ts + dur)
    s = np.asarray(starts, dtype=np.float64) * 1000.0 + base
    t = np.asarray(ends, dtype=np.float64) * 1000.0 + base
    order = np.argsort(s, kind="stable")
    s, t = s[order].astype(np.int64), t[order].astype(np.int64)
    ms, me = merge_intervals(s, t)
    return KinetoGPU(kineto_rank(doc, name), ms, me, len(starts))


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals sorted by start."""
    if len(start) == 0:
        return start, end
    run_end = np.maximum.accumulate(end)
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return start[idx], np.append(run_end[idx[1:] - 1], run_end[-1])


def idle_within(busy: KinetoGPU, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each [lo, hi] interval, GPU idle ns inside it (its length minus GPU busy time in it)."""
    bs, be = busy.start_ns, busy.end_ns
    # cumulative busy time up to each busy interval end lets us integrate busy time over [lo, hi]
    cum = np.concatenate([[0], np.cumsum(be - bs)])

    def busy_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(bs, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(k - 1, 0)]
        partial = np.where(k > 0, np.minimum(t, be[np.maximum(k - 1, 0)]) - bs[np.maximum(k - 1, 0)], 0)
        return np.where(k > 0, full + np.maximum(partial, 0), 0)

    return (hi - lo) - (busy_until(hi) - busy_until(lo))


# the batch columns gpu_report reads (a scanned run's frame is made of these only), and with the batches'
# ids those gpu_batches lists (the --json detail, the figure)
REPORT_COLUMNS = ["rank", "worker_id", "prep_dur_ns", "failed", "n_samples", "wait_start_ns", "wait_dur_ns",
                  "consumed_ns", "gpu_wait_ns", "gpu_step_ns"]
COLUMNS = ["rank", "loader", "epoch", "batch_id", *REPORT_COLUMNS[1:]]


def gpu_batches(batches, kineto: dict[int, KinetoGPU] | None = None):
    """Per consumed batch: host wait, GPU idle while waiting (CUDA events), GPU step time, and the
    Kineto-measured GPU idle during the same wait when a profile covers it (all in ms). The batches' ids
    (loader, epoch, batch_id) where ``batches`` has them (:data:`COLUMNS`; :data:`REPORT_COLUMNS`: the rank only)."""
    import pandas as pd

    keep = batches["consumed_ns"].notna().to_numpy(dtype=bool)

    def col(name):  # one column of the consumed rows at a time (no copy of the frame)
        return batches[name][keep].to_numpy()

    out = pd.DataFrame({
        **{c: col(c) for c in ("rank", "loader", "epoch", "batch_id") if c in batches},
        "wait_ms": _ms(batches["wait_dur_ns"], keep), "gpu_wait_ms": _ms(batches["gpu_wait_ns"], keep),
        "gpu_step_ms": _ms(batches["gpu_step_ns"], keep), "kineto_idle_ms": np.nan,
    })
    if kineto:
        lo = batches["wait_start_ns"][keep].astype("float64").to_numpy()
        hi = batches["consumed_ns"][keep].astype("float64").to_numpy()
        ranks = out["rank"].to_numpy()
        for rank, busy in kineto.items():
            w0, w1 = busy.window
            sel = (ranks == rank) & (lo >= w0) & (hi <= w1) & ~np.isnan(lo)
            if sel.any():
                idle = idle_within(busy, lo[sel].astype(np.int64), hi[sel].astype(np.int64))
                out.loc[sel, "kineto_idle_ms"] = idle / 1e6
    return out


def _ms(column, keep: np.ndarray | None = None) -> np.ndarray:
    """A column of ns as float64 ms (NaN where missing), of the rows ``keep`` (a mask) or all."""
    return (column if keep is None else column[keep]).astype("float64").to_numpy() / 1e6


def gpu_ms_by_rank(batches) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per rank, the ``gpu_wait_ms`` and ``gpu_step_ms`` of its rows of :func:`gpu_batches` (in their order),
    without the rest of that frame: of pieces of a run's rows, each rank's arrays concatenated are its."""
    keep = batches["consumed_ns"].notna().to_numpy(dtype=bool)
    rank = batches["rank"].to_numpy()[keep]
    wait, step = _ms(batches["gpu_wait_ns"][keep]), _ms(batches["gpu_step_ns"][keep])
    if len(rank) and (rank == rank[0]).all():
        return {int(rank[0]): (wait, step)}
    return {int(r): (wait[rank == r], step[rank == r]) for r in np.unique(rank).tolist()}


def _dist(values: np.ndarray) -> dict | None:
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return None
    return {"count": len(v), "sum": float(v.sum()), "mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p90": float(np.percentile(v, 90)), "max": float(v.max())}


def _telemetry(events, t0: int, t1: int, samples: int) -> dict | None:
    tel = events[(events["cat"] == "gpu") & (events["start_ns"] >= t0) & (events["start_ns"] <= t1)]
    if tel.empty:
        return None
    out: dict = {"samples": int((tel["name"] == "gpu_util").sum())}
    for name, key, scale in (("gpu_util", "util_pct_mean", 1.0), ("gpu_power", "power_w_mean", 1e-3),
                             ("gpu_sm_clock", "sm_clock_mhz_mean", 1.0), ("gpu_mem_clock", "mem_clock_mhz_mean", 1.0)):
        v = tel.loc[tel["name"] == name, "arg"]
        out[key] = float(v.mean() * scale) if len(v) else None
    energy = tel[tel["name"] == "gpu_energy"].sort_values("start_ns")
    if len(energy) >= 2:
        joules = float(energy["arg"].iloc[-1] - energy["arg"].iloc[0]) / 1e3
        secs = float(energy["start_ns"].iloc[-1] - energy["start_ns"].iloc[0]) / 1e9
        out["energy_j"] = joules
        out["energy_window_s"] = secs
        out["energy_per_sample_j"] = joules / samples * (secs / max((t1 - t0) / 1e9, 1e-9)) if samples else None
    return out


def gpu_report(events, batches, kineto: dict[int, KinetoGPU] | None = None) -> dict:
    """GPU idle summary per rank, the straggler rank/worker, and the Kineto cross-check."""
    per = gpu_batches(batches, kineto)
    used = batches["consumed_ns"].notna().to_numpy(dtype=bool)
    rank_of = batches["rank"].to_numpy()
    per_rank = per["rank"].to_numpy()
    ranks: dict = {}
    for rank in np.unique(per_rank):  # groupby("rank")'s groups, without a copy of a run of one rank
        sel = per_rank == rank
        g = per if sel.all() else per[sel]
        ub = used & (rank_of == rank)
        wait_start = batches["wait_start_ns"][ub]
        t0 = int(wait_start.min()) if wait_start.notna().any() else int(batches["consumed_ns"][ub].min())
        t1 = int(batches["consumed_ns"][ub].max())
        del wait_start
        span_ms = (t1 - t0) / 1e6
        samples = int(batches["n_samples"][ub].fillna(0).sum())
        r: dict = {"batches": len(g), "samples": samples, "loop_span_ms": span_ms,
                   "host_wait_ms": _dist(g["wait_ms"].to_numpy()),
                   "host_wait_share": float(np.nansum(g["wait_ms"]) / span_ms) if span_ms > 0 else None}
        has_cuda = g["gpu_wait_ms"].notna().any()
        r["cuda_events"] = bool(has_cuda)
        if has_cuda:
            gw, gs = g["gpu_wait_ms"].to_numpy(), g["gpu_step_ms"].to_numpy()
            covered = np.nansum(gw) + np.nansum(gs)
            r["gpu_idle_waiting_for_data_ms"] = _dist(gw)
            r["gpu_step_ms"] = _dist(gs)
            r["data_idle_share_of_gpu_time"] = float(np.nansum(gw) / covered) if covered > 0 else None
        tel = _telemetry(events[events["rank"] == rank], t0, t1, samples)
        if tel:
            r["telemetry"] = tel
        if kineto and rank in kineto:
            r["kineto"] = _kineto_summary(kineto[rank], g)
        ranks[int(rank)] = r
    cuda_any = any(r["cuda_events"] for r in ranks.values())
    report = {"ranks": ranks, "cuda_events": cuda_any,
              "note": None if cuda_any else "no CUDA events in this trace (CPU run, or CUDA never initialised): "
                                            "host-side wait only"}
    report["straggler"] = straggler(batches, ranks)
    return report


def _kineto_summary(busy: KinetoGPU, g) -> dict:
    w0, w1 = busy.window
    window_ms = (w1 - w0) / 1e6
    busy_ms = float((busy.end_ns - busy.start_ns).sum()) / 1e6
    both = g[g["kineto_idle_ms"].notna() & g["gpu_wait_ms"].notna()]
    out = {"gpu_events": busy.events, "window_ms": window_ms, "gpu_busy_ms": busy_ms,
           "gpu_idle_ms": window_ms - busy_ms,
           "gpu_idle_share": (window_ms - busy_ms) / window_ms if window_ms else None,
           "batches_compared": len(both)}
    covered = g[g["kineto_idle_ms"].notna()]
    if len(covered):
        out["idle_during_waits_ms"] = float(covered["kineto_idle_ms"].sum())
        out["idle_during_waits_share_of_idle"] = (float(covered["kineto_idle_ms"].sum()) / (window_ms - busy_ms)
                                                  if window_ms > busy_ms else None)
    if len(both):
        diff = (both["gpu_wait_ms"] - both["kineto_idle_ms"]).abs()
        step = both["gpu_wait_ms"] + both["gpu_step_ms"].fillna(0)
        mean_step = float(step.mean())
        out["abs_diff_ms"] = {"mean": float(diff.mean()), "p90": float(diff.quantile(0.9)), "max": float(diff.max())}
        out["mean_step_ms"] = mean_step
        out["agreement_mean_pct_of_step"] = float(diff.mean() / mean_step * 100) if mean_step else None
        out["agreement_total_pct_of_steps"] = (float(abs(both["gpu_wait_ms"].sum() - both["kineto_idle_ms"].sum())
                                                     / step.sum() * 100) if step.sum() else None)
    return out


def straggler(batches, ranks: dict) -> dict | None:
    """The rank whose loop waited most for data, and its slowest worker (mean batch preparation)."""
    if len(ranks) < 2:
        return None
    shares = {r: v.get("host_wait_share") or 0.0 for r, v in ranks.items()}
    rank = max(shares, key=shares.get)
    b = prepared(batches)
    b = b[b["rank"] == rank]
    worker = None
    if len(b):
        per = b.groupby("worker_id")["prep_dur_ns"].mean() / 1e6
        worker = {"worker_id": int(per.idxmax()), "mean_prep_ms": float(per.max()),
                  "mean_prep_ms_other_workers": float(per.drop(per.idxmax()).mean()) if len(per) > 1 else None}
    others = [s for r, s in shares.items() if r != rank]
    return {"rank": int(rank), "host_wait_share": shares[rank],
            "other_ranks_mean_wait_share": float(np.mean(others)) if others else None, "slowest_worker": worker}


def plot_gpu_batches(per_batch):
    """Per consumed batch: GPU idle waiting for data (CUDA events) and GPU step time, stacked (ms)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4), constrained_layout=True)
    ranks = sorted(per_batch["rank"].unique())
    offset = 0
    for rank in ranks:
        g = per_batch[per_batch["rank"] == rank].reset_index(drop=True)
        x = np.arange(len(g)) + offset
        ax.bar(x, g["gpu_step_ms"].fillna(0), color="#4c72b0", label="GPU step" if rank == ranks[0] else None)
        ax.bar(x, g["gpu_wait_ms"].fillna(0), bottom=g["gpu_step_ms"].fillna(0), color="#dd8452",
               label="GPU idle waiting for data" if rank == ranks[0] else None)
        if g["kineto_idle_ms"].notna().any():
            ax.plot(x, g["gpu_step_ms"].fillna(0) + g["kineto_idle_ms"], "k.", ms=3,
                    label="Kineto idle during wait (on top of step)" if rank == ranks[0] else None)
        offset += len(g) + 2
    ax.set_xlabel("consumed batch (ranks side by side)" if len(ranks) > 1 else "consumed batch")
    ax.set_ylabel("GPU time per step (ms)")
    ax.set_title("GPU time per training step: compute vs idle waiting for data")
    ax.legend(loc="upper right")
    return fig


def plot_telemetry(events):
    """GPU utilisation (%) and power (W) over time, per rank."""
    import matplotlib.pyplot as plt

    tel = events[events["cat"] == "gpu"]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 5), sharex=True, constrained_layout=True)
    if tel.empty:
        a1.text(0.5, 0.5, "no GPU telemetry in this trace", ha="center", va="center", transform=a1.transAxes)
        return fig
    t0 = tel["start_ns"].min()
    for rank, g in tel.groupby("rank"):
        u = g[g["name"] == "gpu_util"]
        p = g[g["name"] == "gpu_power"]
        a1.plot((u["start_ns"] - t0) / 1e9, u["arg"], label=f"rank {rank}")
        a2.plot((p["start_ns"] - t0) / 1e9, p["arg"] / 1e3, label=f"rank {rank}")
    a1.set_ylabel("GPU utilisation (%)")
    a2.set_ylabel("power (W)")
    a2.set_xlabel("time since first sample (s)")
    a1.legend(loc="lower right")
    return fig
