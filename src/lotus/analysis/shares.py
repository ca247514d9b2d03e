"""The columns of the verdict's per-epoch loop spans and per-worker utilisation, and the shares computed
from their sums: shared by the DataFrame path (:mod:`lotus.analysis.diagnosis`) and the compact tables
(:mod:`lotus.analysis.compactverdict`), and their merges over pieces of a run's rows (``lotus analyze ranks``
of one large rank). numpy and pandas objects only; imports nothing of lotus.
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


def loop_spans_of(parts):
    """:func:`lotus.analysis.diagnosis.loop_spans` from the :func:`~lotus.analysis.diagnosis.loop_span_sums`
    of pieces of a run's rows (None: a piece without any): per group the batches and waits summed, the first
    start and last end (integers: exact in any order, the same frame as of the whole)."""
    import pandas as pd

    parts = [p for p in parts if p is not None]
    if not parts:
        return pd.DataFrame(columns=LOOP_SPAN_COLUMNS)
    out = parts[0] if len(parts) == 1 else _merged(parts, batches="sum", start_ns="min", end_ns="max",
                                                   wait_ns="sum")
    return with_span_shares(out)


def epoch_spans_of(parts):
    """:func:`lotus.analysis.diagnosis.epoch_spans` from the :func:`~lotus.analysis.diagnosis.epoch_bounds`
    of pieces of a run's rows (minima and maxima: the same in any order)."""
    parts = [p for p in parts if p is not None]
    parts = [p for p in parts if len(p)] or parts[:1]  # an empty piece's columns may be of another dtype
    out = parts[0] if len(parts) == 1 else _merged(parts, start_ns="min", end_ns="max")
    out["span_ns"] = (out["end_ns"] - out["start_ns"]).astype("float64")
    return out


def utilisation_of_parts(parts):
    """:func:`lotus.analysis.diagnosis.worker_utilisation` from the
    :func:`~lotus.analysis.diagnosis.worker_sums` of pieces of a run's rows: per (rank, worker_id, loader,
    epoch) batches and busy time summed (integers), the epochs' bounds merged."""
    import pandas as pd

    per = [p for p, _ in parts if p is not None]
    if not per:
        return pd.DataFrame(columns=UTILISATION_COLUMNS)
    per_epoch = per[0] if len(per) == 1 else _merged(per, ["rank", "worker_id", *GROUP[1:]], batches="sum",
                                                     busy_ns="sum")
    spans = epoch_spans_of([b for _, b in parts]).set_index(GROUP)["span_ns"]
    return utilisation_of(per_epoch, spans)


def _merged(parts, by=GROUP, **how):
    """The per-group rows of ``parts`` (frames of ``by`` and the columns of ``how``) reduced per group."""
    import pandas as pd

    g = pd.concat(parts, ignore_index=True).groupby(list(by), sort=True)
    return pd.DataFrame({c: getattr(g[c], f)() for c, f in how.items()}).reset_index()
