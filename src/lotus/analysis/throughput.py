"""Throughput of the training loop from a trace: samples/s handed to the loop, per loader and in all.

Steady state: per (rank, loader, epoch) the samples of every consumed batch but the first, over the time
from the first to the last consumption (the first batch's wait is start-up: worker launch, cold
reads). Epochs add up (samples and time); ranks run side by side, so their rates add up. The headline
is the loader that handed out the most batches per rank (the training loader when a script also
validates). Failed batches and exhausted fetches are not batches (``ok_batches``).

``summarize_run(path)`` is what a launcher probe reports: this, plus the verdict's wait share; for a
replay probe (``LOTUS_REPLAY``) only the replayed batches count (the loop's ingestion rate).
"""

from __future__ import annotations

import logging
import os

import numpy as np

_log = logging.getLogger("lotus.analysis")


def _batch_size(loaders: dict, rank: int, loader: int):
    desc = (loaders or {}).get((rank, loader)) or {}
    bs = desc.get("batch_size")
    return int(bs) if isinstance(bs, int) and bs > 0 else None


def loader_throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False):
    """One row per (rank, loader): batches, samples, steady_samples, steady_s, samples_per_s.

    ``replayed_only``: only batches that lotus replayed (``LOTUS_REPLAY``: consumed, never prepared),
    i.e. the loop's ingestion rate without loading."""
    import pandas as pd

    from lotus.trace.batches import ok_batches

    cols = ["rank", "loader", "batches", "samples", "steady_samples", "steady_s", "samples_per_s"]
    b = ok_batches(batches)
    b = b[b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    if replayed_only:
        b = b[b["prep_dur_ns"].isna().to_numpy(dtype=bool, na_value=True)]
    if b.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (rank, loader), g in b.groupby(["rank", "loader"], sort=True):
        fallback = _batch_size(loaders, int(rank), int(loader))
        n = g["n_samples"].astype("Float64")
        if fallback is not None:
            n = n.fillna(fallback)
        g = g.assign(_n=n.fillna(np.nan).astype("float64"), _t=g["consumed_ns"].astype("int64"))
        steady_n = steady_t = 0.0
        for _, e in g.groupby("epoch", sort=True):
            if len(e) < 2:
                continue
            e = e.sort_values("_t")
            steady_n += float(np.nansum(e["_n"].to_numpy()[1:]))
            steady_t += float(e["_t"].iloc[-1] - e["_t"].iloc[0]) / 1e9
        rows.append({"rank": int(rank), "loader": int(loader), "batches": len(g),
                     "samples": float(np.nansum(g["_n"].to_numpy())), "steady_samples": steady_n,
                     "steady_s": steady_t, "samples_per_s": steady_n / steady_t if steady_t > 0 else None})
    return pd.DataFrame(rows, columns=cols)


def throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False) -> dict:
    """Samples/s of the main loader (summed over ranks), and the per-loader table as records."""
    per = loader_throughput(batches, loaders, replayed_only=replayed_only)
    if per.empty:
        return {"samples_per_s": None, "batches": 0, "samples": 0, "loader": None, "loaders": []}
    by_loader = per.groupby("loader")["batches"].sum()
    main = int(by_loader.idxmax())
    m = per[per["loader"] == main]
    rates = m["samples_per_s"].dropna()
    return {"samples_per_s": float(rates.sum()) if len(rates) else None, "batches": int(m["batches"].sum()),
            "samples": float(m["samples"].sum()), "loader": main, "ranks": len(m),
            "loaders": per.to_dict(orient="records")}


def summarize_run(path: str | os.PathLike) -> dict:
    """Throughput and wait share of the run at ``path``; ``traced`` False when it holds no trace."""
    from lotus.analysis.diagnosis import verdict
    from lotus.analysis.runs import load_config
    from lotus.errors import InputError

    try:
        cfg = load_config(path)
    except InputError as exc:
        return {"traced": False, "reason": str(exc)}
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    replayed = any(isinstance(d, dict) and d.get("replay_batches") for d in cfg.loaders.values())
    t = throughput(cfg.batches, cfg.loaders, replayed_only=replayed)
    return {"traced": True, **t, "wait_share": v["wait_share"], "steady_wait_share": v["steady_wait_share"],
            "class": v["class"], "verdict": v, "name": cfg.name}
