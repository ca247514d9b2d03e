"""Throughput of the training loop from a trace: samples/s handed to the loop, per loader and in all.

Two measures, per (rank, loader); ranks run side by side, so their rates add up:

* ``skip="ramp"`` (default; what a launcher probe reports): from the hand-off of the *ramp*'s last batch
  to the last hand-off of the run, epoch starts inside counted. The ramp is the ``num_workers x
  prefetch_factor`` batches (1 without workers) that can all be ready before the loop's first request:
  they go at the step's pace, so counting them favours many workers on short probes.
* ``skip="epoch"`` (the steady state inside epochs, what lotus.model simulates): the same per epoch,
  without the epoch starts, summed over epochs.

Failed batches and exhausted fetches are not batches (``ok_batches``). The headline is the loader that
handed out the most batches (the training loader when a script also validates).

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


def ramp_batches(desc: dict | None) -> int:
    """Batches that can be ready before the loop's first request: ``num_workers x prefetch_factor`` (>= 1)."""
    desc = desc or {}
    w = desc.get("num_workers") if isinstance(desc.get("num_workers"), int) else 0
    pf = desc.get("prefetch_factor") if isinstance(desc.get("prefetch_factor"), int) else 2
    return max(w * pf, 1)


def _rate(t: np.ndarray, n: np.ndarray, k: int) -> tuple[float, float]:
    """(samples, seconds) after the ``k``-th of the sorted hand-offs ``t`` (k at most len - 2; >= 1)."""
    if len(t) < 2:
        return 0.0, 0.0
    k = max(1, min(k, len(t) - 2)) if len(t) > 2 else 1
    return float(np.nansum(n[k:])), float(t[-1] - t[k - 1]) / 1e9


def loader_throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False, skip: str = "ramp"):
    """One row per (rank, loader): batches, samples, steady_samples, steady_s, samples_per_s (see the
    module doc for ``skip``). ``replayed_only``: only batches lotus replayed (``LOTUS_REPLAY``: consumed,
    never prepared), i.e. the loop's ingestion rate without loading."""
    import pandas as pd

    from lotus.trace.batches import ok_batches

    if skip not in ("ramp", "epoch"):
        raise ValueError(f"skip must be 'ramp' or 'epoch', not {skip!r}")
    cols = ["rank", "loader", "batches", "samples", "steady_samples", "steady_s", "samples_per_s"]
    b = ok_batches(batches)
    b = b[b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    if replayed_only:
        b = b[b["prep_dur_ns"].isna().to_numpy(dtype=bool, na_value=True)]
    if b.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (rank, loader), g in b.groupby(["rank", "loader"], sort=True):
        desc = (loaders or {}).get((int(rank), int(loader))) or {}
        fallback = _batch_size(loaders, int(rank), int(loader))
        n = g["n_samples"].astype("Float64")
        if fallback is not None:
            n = n.fillna(fallback)
        g = g.assign(_n=n.to_numpy(np.float64, na_value=np.nan), _t=g["consumed_ns"].astype("int64"))
        k = 1 if replayed_only else ramp_batches(desc)
        steady_n = steady_t = 0.0
        parts = [g] if skip == "ramp" else [e for _, e in g.groupby("epoch", sort=True)]
        for part in parts:
            part = part.sort_values("_t")
            dn, dt = _rate(part["_t"].to_numpy(np.float64), part["_n"].to_numpy(), k)
            steady_n += dn
            steady_t += dt
        rows.append({"rank": int(rank), "loader": int(loader), "batches": len(g),
                     "samples": float(np.nansum(g["_n"].to_numpy())), "steady_samples": steady_n,
                     "steady_s": steady_t, "samples_per_s": steady_n / steady_t if steady_t > 0 else None})
    return pd.DataFrame(rows, columns=cols)


def throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False, skip: str = "ramp") -> dict:
    """Samples/s of the main loader (summed over ranks), and the per-loader table as records."""
    per = loader_throughput(batches, loaders, replayed_only=replayed_only, skip=skip)
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
    # a replay probe: the replayed batches inside epochs (an epoch start prepares batches anew: not ingestion)
    t = throughput(cfg.batches, cfg.loaders, replayed_only=replayed, skip="epoch" if replayed else "ramp")
    return {"traced": True, **t, "wait_share": v["wait_share"], "steady_wait_share": v["steady_wait_share"],
            "class": v["class"], "verdict": v, "name": cfg.name}
