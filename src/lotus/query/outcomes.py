"""What the fetches of a run say beside its batches: the fetches that made no batch (failed, an exhausted
IterableDataset: :func:`fetch_outcomes`, :func:`outcome_summary`) and the share of detail batches among the
successful ones (:func:`detail_share`, from counts that add up over runs and ranks read apart)."""

from __future__ import annotations

import numpy as np

from lotus.query.batches import KEY, OUTCOME_COLUMNS, failed_mask, worker_label
from lotus.trace import schema as S


def fetch_outcomes(events):
    """Pure function: every fetch of ``events`` that did not make a batch, one row each, sorted by key.

    Columns :data:`OUTCOME_COLUMNS`: the batch key, ``worker_id`` and ``pid`` of the process that
    fetched (-1: main process), ``outcome`` (``"exhausted"``: the IterableDataset had no more data;
    ``"failed"``: the fetch raised), ``start_ns`` and ``dur_ns`` of that fetch.
    """
    import pandas as pd

    name_cat = events["name"].array
    codes = np.asarray(name_cat.codes)
    lookup = {str(c): i for i, c in enumerate(name_cat.categories)}
    has_batch = events["batch_id"].to_numpy() >= 0
    arg = events["arg"].to_numpy()
    masks = {"exhausted": codes == lookup.get("exhausted", -2),
             "failed": (codes == lookup.get("fetch", -2)) & (arg > 0) & ((arg & S.FETCH_ERROR) != 0)}
    parts = []
    for outcome, mask in masks.items():
        mask = mask & has_batch
        if mask.any():
            part = events.loc[mask, [*KEY, "worker_id", "pid", "start_ns", "dur_ns"]]
            parts.append(part.assign(outcome=outcome))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "outcome" else "int64") for c in OUTCOME_COLUMNS})
    out = pd.concat(parts, ignore_index=True).sort_values([*KEY, "start_ns"], ignore_index=True)
    out.attrs = {}
    return out[OUTCOME_COLUMNS]


def outcome_summary(batches) -> dict:
    """What the rows and ``attrs`` of a batches DataFrame say about its fetches::

        {"batches": rows, "ok": n, "failed": n, "failed_by_worker": {"r0/w1": n},
         "exhausted": n, "exhausted_by_worker": {...}, "dispatched_without_batch": n}

    ``batches``: a DataFrame or a scanned run's :class:`~lotus.query.batchtable.BatchTable`.
    """
    if hasattr(type(batches), "outcome_summary"):  # a BatchTable: it counts its own
        return batches.outcome_summary()
    failed = batches[failed_mask(batches)]
    return outcomes_of(len(batches), failed["rank"].tolist(), failed["worker_id"].fillna(-1).astype("int64").tolist(),
                    batches.attrs)


def outcomes_of(n: int, ranks: list, workers: list, a: dict) -> dict:
    """:func:`outcome_summary` of ``n`` batches whose failed ones are at (ranks, workers)."""
    by_worker: dict[str, int] = {}
    for r, w in zip(ranks, workers, strict=True):
        label = worker_label(r, w)
        by_worker[label] = by_worker.get(label, 0) + 1
    return {"batches": n, "ok": n - len(ranks), "failed": len(ranks),
            "failed_by_worker": dict(sorted(by_worker.items())), "exhausted": int(a.get("exhausted", 0)),
            "exhausted_by_worker": dict(a.get("exhausted_by_worker", {})),
            "dispatched_without_batch": int(a.get("dispatched_without_batch", 0))}


def detail_counts_share(fetches) -> float:
    """:func:`lotus.query.outcomes.detail_share` from counts (ok, ok and detail, detail) of fetches."""
    ok, ok_flagged, flagged = (int(x) for x in fetches)
    if not ok or not flagged:
        return 1.0
    return float(ok_flagged) / float(ok)


def detail_counts(events) -> tuple[int, int, int]:
    """Counts of the fetches of ``events``: (ok, ok and detail, detail), what :func:`detail_share` reads (of a scanned
    run, the scan's counts); they add up over runs or ranks read apart."""
    counts = getattr(events.attrs.get("op_engine"), "fetch_counts", None)
    if counts is not None:  # a scanned run keeps no fetch rows: the scan counted their flags
        return tuple(int(x) for x in counts)
    name_cat = events["name"].array
    code = {str(c): i for i, c in enumerate(name_cat.categories)}.get("fetch")
    if code is None:
        return 0, 0, 0
    mask = (np.asarray(name_cat.codes) == code) & (events["batch_id"].to_numpy() >= 0)
    arg = events["arg"].to_numpy()[mask]
    ok = (arg < 0) | ((arg & S.FETCH_ERROR) == 0)
    flagged = (arg > 0) & ((arg & S.FETCH_DETAIL) != 0)
    return int(ok.sum()), int(flagged[ok].sum()), int(flagged.sum())


def detail_share(events) -> float:
    """Pure function: the share of successful fetches of ``events`` that are detail batches (carry
    per-sample/per-op records). 1.0 for traces without the flag (earlier formats, original logs: every
    batch was recorded in full) and for traces without fetches."""
    return detail_counts_share(detail_counts(events))


__all__ = ["detail_counts", "detail_counts_share", "detail_share", "fetch_outcomes", "outcome_summary", "outcomes_of"]
