"""What a run holds: its files, DataLoaders, time span, event counts and fetch outcomes (``lotus info``)."""

from __future__ import annotations

import numpy as np


def run_info(events, batches=None) -> dict:
    """Summary of one run's events DataFrame (``events.attrs["files"]`` lists the files read) and its batches
    (a DataFrame or a scanned run's compact table, :attr:`lotus.analysis.runs.Config.summary_batches`). A scanned
    run's events hold no per-sample detail: its counts, span, ranks and epochs come from the scan's
    census of every record (:class:`lotus.query.census.Census`), the same figures."""
    files = []
    for f in events.attrs.get("files", []):
        files.append({k: f.get(k) for k in ("path", "format", "role", "pid", "rank", "worker_id", "events",
                                            "clean_close", "hostname")})
    loaders = {}
    for f in events.attrs.get("files", []):
        for key, desc in (f.get("loaders") or {}).items():
            loaders[f"r{f.get('rank', 0)}/loader{key}"] = desc
    census = getattr(events.attrs.get("op_engine"), "census", None)
    if census is not None:
        lo, hi, n = census.start_ns, census.end_ns, census.events()
        ranks, epochs = sorted(census.ranks), sorted(census.epochs)
        counts = census.by_label([str(c) for c in events["name"].cat.categories])
    else:
        n = len(events)
        start = events["start_ns"].to_numpy()
        end = start + events["dur_ns"].to_numpy()
        lo, hi = (int(start.min()), int(end.max())) if n else (None, None)
        ranks = sorted(int(r) for r in np.unique(events["rank"].to_numpy()))
        epochs = sorted(int(e) for e in np.unique(events["epoch"].to_numpy()))
        counts = {str(k): int(v) for k, v in events["name"].value_counts(sort=False).items() if v > 0}
    out = {
        "run": events.attrs.get("run"),
        "path": events.attrs.get("path"),
        "files": files,
        "loaders": loaders,
        "ranks": ranks,
        "epochs": epochs,
        "events": n,
        "span": {"start_ns": lo, "end_ns": hi, "duration_s": float(hi - lo) / 1e9} if n else None,
        "event_counts": counts,
        "unclean_files": sum(1 for f in files if f["clean_close"] is False),
    }
    if batches is not None:
        from lotus.analysis.compact import is_table
        from lotus.query import outcome_summary

        if is_table(batches):  # a scanned run's compact table: counted a view at a time, no DataFrame
            from lotus.analysis.compact import prepared_count, valid_count

            n_prepared, n_consumed = prepared_count(batches), valid_count(batches, "consumed_ns")
        else:
            from lotus.analysis.stats import prepared

            n_prepared, n_consumed = len(prepared(batches)), int(batches["consumed_ns"].notna().sum())
        o = outcome_summary(batches)
        out["batches"] = {"prepared": n_prepared, "consumed": n_consumed,
                          **{k: o[k] for k in ("failed", "failed_by_worker", "exhausted", "exhausted_by_worker",
                                               "dispatched_without_batch")}}
    return out


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def outcome_note(outcomes: dict, *, dispatched: bool = False) -> str | None:
    """One line on the fetches that are not (timed) batches, from
    :func:`lotus.query.outcomes.outcome_summary` (or ``run_info(...)["batches"]``); None when all were.
    ``dispatched``: also count the indices dispatched without a batch (torch's prefetch past the end)."""
    parts = []
    if outcomes.get("failed"):
        where = ", ".join(f"{w}: {n}" for w, n in outcomes.get("failed_by_worker", {}).items())
        parts.append(f"{_n(outcomes['failed'], 'failed batch', 'failed batches')} (the fetch raised; {where}), "
                     "left out of the timings")
    if outcomes.get("exhausted"):
        parts.append(f"{_n(outcomes['exhausted'], 'exhausted fetch', 'exhausted fetches')} "
                     "(IterableDataset end), not batches")
    if dispatched and outcomes.get("dispatched_without_batch"):
        parts.append(f"{_n(outcomes['dispatched_without_batch'], 'index', 'indices')} dispatched without a batch "
                     "(prefetched past the end, or never prepared)")
    return "; ".join(parts) or None
