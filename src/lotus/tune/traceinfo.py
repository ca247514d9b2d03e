"""What a probe's trace says: tuning's samples/s, the settings the loader ran with, CUDA, epoch starts.

Pure functions of the DataFrames of :class:`lotus.model.RunTrace` (events, batches, loader
descriptions) for the main loader (the one that handed out the most batches), rank 0 unless said.

Tuning's samples/s is the launcher's, the one measure (``lotus.analysis.throughput``): the first
``num_workers x prefetch_factor`` batches left out (they can all be ready before the loop's first
request), epoch starts inside the window counted, as a long run pays them; with its 95% interval.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from lotus.tune.types import EpochFacts, LoaderSettings


def main_loader(batches) -> int | None:
    if batches is None or len(batches) == 0:
        return None
    return int(batches.groupby("loader").size().idxmax())


def description(loaders: dict, batches) -> dict:
    """The main loader's description (rank 0, else the first rank that has one)."""
    loader = main_loader(batches)
    if loader is None:
        return {}
    for (_rank, lid), desc in sorted((loaders or {}).items(), key=lambda kv: kv[0]):
        if lid == loader and isinstance(desc, dict):
            return desc
    return {}


def effective_settings(desc: dict) -> LoaderSettings | None:
    if not desc or not isinstance(desc.get("num_workers"), int):
        return None
    w = desc["num_workers"]
    pf = desc.get("prefetch_factor")
    return LoaderSettings(num_workers=w, prefetch_factor=(pf if isinstance(pf, int) else 2) if w else None,
                          pin_memory=bool(desc.get("pin_memory")),
                          persistent_workers=bool(desc.get("persistent_workers")))


def used_cuda(batches) -> bool:
    """GPU events (CUDA events around waits and steps) in the trace: the job used CUDA."""
    for col in ("gpu_step_ns", "gpu_wait_ns"):
        if col in batches.columns and batches[col].notna().to_numpy(dtype=bool, na_value=False).any():
            return True
    return False


def ranks(batches) -> int:
    return max(int(batches["rank"].nunique()), 1) if batches is not None and len(batches) else 1


def _ints(s) -> np.ndarray:
    return s.astype("Float64").to_numpy(np.float64, na_value=np.nan)


def epoch_facts(events, batches, desc: dict) -> EpochFacts:
    """Epoch length, the first epoch's start-up and the extra time of later epoch starts (see EpochFacts)."""
    out = EpochFacts()
    loader = main_loader(batches)
    if loader is None:
        return out
    n_ranks = ranks(batches)
    length, bs = desc.get("dataset_len"), desc.get("batch_size")
    if isinstance(length, int) and isinstance(bs, int) and bs > 0 and length > 0:
        per_rank = math.ceil(length / n_ranks)
        out.batches_per_epoch = per_rank // bs if desc.get("drop_last") else math.ceil(per_rank / bs)
    b = batches[(batches["loader"].to_numpy() == loader) & (batches["rank"].to_numpy() == 0)]
    b = b[b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    if b.empty:
        return out
    epoch = _ints(b["epoch"])
    t = _ints(b["consumed_ns"])
    order = np.lexsort((t, epoch))
    epoch, t = epoch[order], t[order]
    diffs = [np.diff(t[epoch == e]) for e in np.unique(epoch)]
    steady = np.concatenate(diffs) if diffs else np.zeros(0)
    if steady.size:
        out.batch_interval_s = float(steady.mean()) / 1e9
    prep = _ints(b["prep_dur_ns"]) if "prep_dur_ns" in b.columns else np.zeros(0)
    prep = prep[np.isfinite(prep)]
    if prep.size:
        out.batch_prep_s = float(np.median(prep)) / 1e9
    epochs = np.unique(epoch)
    extra = []
    for prev, e in itertools.pairwise(epochs):
        if e != prev + 1:
            continue
        gap = t[epoch == e].min() - t[epoch == prev].max()
        extra.append(gap / 1e9 - (out.batch_interval_s or 0.0))
    out.epochs_crossed = len(extra)
    if extra:
        out.boundary_extra_s = float(np.mean(extra))
    first = t[epoch == epochs[0]].min()
    starts = _starts(events, loader, int(epochs[0]))
    if starts is not None and starts < first:
        out.startup_s = float(first - starts) / 1e9
    return out


def _starts(events, loader: int, epoch: int) -> float | None:
    """When epoch ``epoch`` of ``loader`` began on rank 0: its epoch_start or first worker start."""
    if events is None or len(events) == 0:
        return None
    mask = events["name"].isin(("epoch_start", "worker_start")).to_numpy(dtype=bool)
    if not mask.any():
        return None
    ev = events[mask]
    keep = (_ints(ev["loader"]) == loader) & (_ints(ev["rank"]) == 0) & (_ints(ev["epoch"]) == epoch)
    if "loader" in ev.columns and not keep.any():
        keep = (_ints(ev["rank"]) == 0) & (_ints(ev["epoch"]) == epoch)
    t = _ints(ev["start_ns"])[keep]
    return float(t.min()) if t.size else None


__all__ = ["description", "effective_settings", "epoch_facts", "main_loader", "ranks", "used_cuda"]
