"""The columns of the verdict's per-epoch loop spans and per-worker utilisation, and the shares computed
from their sums: shared by the DataFrame path (:mod:`lotus.analysis.diagnosis`) and the compact tables
(:mod:`lotus.analysis.compactverdict`). numpy and pandas objects only; imports nothing of lotus.
"""

from __future__ import annotations

import numpy as np

GROUP = ["rank", "loader", "epoch"]
LOOP_SPAN_COLUMNS = [*GROUP, "batches", "start_ns", "end_ns", "span_ns", "wait_ns", "wait_share"]
UTILISATION_COLUMNS = ["rank", "worker_id", "batches", "busy_ns", "span_ns", "busy_share"]


def with_span_shares(out):
    """``span_ns`` and ``wait_share`` added to per-group ``start_ns``, ``end_ns`` and ``wait_ns``."""
    out["span_ns"] = out["end_ns"] - out["start_ns"]
    out["wait_share"] = out["wait_ns"] / out["span_ns"].where(out["span_ns"] > 0)
    return out


def utilisation_of(per_epoch, spans):
    """:func:`lotus.analysis.diagnosis.worker_utilisation` from per (rank, worker_id, loader, epoch)
    ``batches`` and ``busy_ns``, and the epochs' spans (``spans.get((rank, loader, epoch), nan)``)."""
    per_epoch["span_ns"] = [spans.get((r, lo, e), np.nan) for r, lo, e in
                            zip(per_epoch["rank"], per_epoch["loader"], per_epoch["epoch"], strict=True)]
    out = per_epoch.groupby(["rank", "worker_id"], sort=True).agg(
        batches=("batches", "sum"), busy_ns=("busy_ns", "sum"), span_ns=("span_ns", "sum")).reset_index()
    out["busy_ns"] = out["busy_ns"].astype("float64")
    out["busy_share"] = out["busy_ns"] / out["span_ns"].where(out["span_ns"] > 0)
    return out
