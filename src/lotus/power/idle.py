"""GPU idle caused by waiting for data, from a tenant's (or a command's) lotus trace.

The share is lotus.analysis's: GPU idle while the loop waited for data over GPU time (CUDA events of
the traced DataLoader), or the loop's host wait share where the trace has no CUDA events (CPU runs).
"""

from __future__ import annotations

import logging
import math
import os

_log = logging.getLogger("lotus.power")


def load_trace(trace_dir: str | os.PathLike):
    """The run at ``trace_dir`` (lotus.analysis.runs.Config), or None when it cannot be read."""
    try:
        from lotus.analysis.runs import load_config

        return load_config(trace_dir)
    except Exception as exc:  # the measurement stands without it
        _log.info("no trace in %s: %s", trace_dir, exc)
        return None


def data_idle_share(trace, loader_name: str | None = None, t0_ns: float | None = None,
                    t1_ns: float | None = None) -> float | None:
    """The data-idle share of the loader named ``loader_name`` (all loaders: None) over the batches
    consumed in [t0_ns, t1_ns] (wall-clock ns); ``trace``: a directory or a loaded run; None when the
    trace cannot say."""
    cfg = load_trace(trace) if isinstance(trace, (str, os.PathLike)) else trace
    if cfg is None:
        return None
    try:
        from lotus.analysis.gpu import gpu_report

        b = cfg.batches
        if loader_name is not None:
            ids = [lid for (_, lid), desc in cfg.loaders.items() if desc.get("name") == loader_name]
            b = b[b["loader"].isin(ids)]
        if t0_ns is not None and t1_ns is not None:
            c = b["consumed_ns"].astype("float64")
            b = b[(c >= t0_ns) & (c <= t1_ns)]
        b = b[b["consumed_ns"].notna()]
        if b.empty:
            return None
        shares = []
        for r in gpu_report(cfg.events.iloc[:0], b)["ranks"].values():
            s = r.get("data_idle_share_of_gpu_time") if r.get("cuda_events") else r.get("host_wait_share")
            if s is not None and math.isfinite(s):
                shares.append(float(s))
        return sum(shares) / len(shares) if shares else None
    except Exception as exc:
        _log.info("no data-idle share from %s: %s", getattr(cfg, "path", trace), exc)
        return None
