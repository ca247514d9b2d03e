"""What got slower or faster between two runs: per op, per batch, and the loop's wait.

``diff_runs(a_events, a_batches, b_events, b_batches)`` compares run B to run A (the baseline; batches:
DataFrames, or a scanned run's :class:`lotus.query.BatchTable`, of which only the columns the per-batch
comparison reads are made a DataFrame, :data:`DIFF_COLUMNS`):
changes are ``B - A`` (positive = slower in B) and ``change_pct = (B - A) / A * 100``. Batches are
matched on (rank, loader, epoch, batch_id). Failed batches and exhausted fetches are compared by count
only (``batches.failed``, ``batches.exhausted``), never timed.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis import compact
from lotus.analysis.diagnosis import loop_spans
from lotus.analysis.stats import KEY, describe_ms, op_stats, prepared
from lotus.query import outcome_summary

_COMPARED = ("mean", "median", "p90", "sum")
DIFF_COLUMNS = [*KEY, "worker_id", "prep_dur_ns", "wait_dur_ns", "failed"]  # what prepared/batch_changes read


def _frame(batches):
    """The batches DataFrame, or a scanned run's table's :data:`DIFF_COLUMNS` as one."""
    return batches.frame(DIFF_COLUMNS) if compact.is_table(batches) else batches


def _change(a: float | None, b: float | None) -> dict:
    if a is None or b is None:
        return {"a": a, "b": b, "change": None, "change_pct": None}
    return {"a": a, "b": b, "change": b - a, "change_pct": (b - a) / a * 100 if a else None}


def _compare(da: dict, db: dict) -> dict:
    out = {k: _change(da.get(k), db.get(k)) for k in _COMPARED}
    out["count"] = {"a": da.get("count", 0), "b": db.get("count", 0)}
    return out


def batch_changes(a_batches, b_batches):
    """Matched batches: key, worker ids, preprocessing and wait in A and B (ms) and their changes."""
    import pandas as pd

    cols = [*KEY, "worker_id", "prep_dur_ns", "wait_dur_ns"]
    m = pd.merge(prepared(a_batches)[cols], prepared(b_batches)[cols], on=KEY, suffixes=("_a", "_b"), how="inner")
    out = m[KEY].copy()
    out["worker_a"] = m["worker_id_a"]
    out["worker_b"] = m["worker_id_b"]
    for name, col in (("prep", "prep_dur_ns"), ("wait", "wait_dur_ns")):
        a = m[f"{col}_a"].to_numpy(dtype=np.float64, na_value=np.nan) / 1e6
        b = m[f"{col}_b"].to_numpy(dtype=np.float64, na_value=np.nan) / 1e6
        out[f"{name}_a_ms"] = a
        out[f"{name}_b_ms"] = b
        out[f"{name}_change_ms"] = b - a
    return out.reset_index(drop=True)


def _wait_share(batches) -> float | None:
    spans = loop_spans(batches)
    total = float(spans["span_ns"].sum()) if len(spans) else 0.0
    return float(spans["wait_ns"].sum()) / total if total > 0 else None


def diff_runs(a_events, a_batches, b_events, b_batches, *, top: int = 10) -> dict:
    """Changes from run A to run B (see the module doc)."""
    ops_a, ops_b = op_stats(a_events), op_stats(b_events)  # either engine (lotus.analysis.runs)
    tables = a_batches, b_batches  # loop spans and outcomes: of a table itself where there is one
    a_batches, b_batches = _frame(a_batches), _frame(b_batches)
    ops = {}
    for name in list(dict.fromkeys([*ops_a, *ops_b])):
        ops[name] = _compare(ops_a.get(name) or describe_ms([]), ops_b.get(name) or describe_ms([]))
    prep = _compare(describe_ms(prepared(a_batches)["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)),
                    describe_ms(prepared(b_batches)["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)))
    matched = batch_changes(a_batches, b_batches)
    ch = matched["prep_change_ms"].to_numpy()
    ok = ~np.isnan(ch)
    slowest = matched[ok].sort_values("prep_change_ms", ascending=False, kind="stable").head(top)
    batches = {
        "matched": int(ok.sum()),
        "only_in_a": int(len(prepared(a_batches)) - len(matched)),
        "only_in_b": int(len(prepared(b_batches)) - len(matched)),
        "slower": int((ch[ok] > 0).sum()),
        "faster": int((ch[ok] < 0).sum()),
        "median_change_ms": float(np.median(ch[ok])) if ok.any() else None,
        "most_slowed": [
            {**{k: int(r[k]) for k in KEY}, "a_ms": float(r["prep_a_ms"]), "b_ms": float(r["prep_b_ms"]),
             "change_ms": float(r["prep_change_ms"])} for _, r in slowest.iterrows() if r["prep_change_ms"] > 0
        ],
    }
    oa, ob = outcome_summary(tables[0]), outcome_summary(tables[1])
    for k in ("failed", "exhausted"):
        batches[k] = {"a": oa[k], "b": ob[k]}
    wa, wb = _wait_share(tables[0]), _wait_share(tables[1])
    slower = sorted(
        ({"what": name, "change_pct": d["mean"]["change_pct"], "change_ms": d["mean"]["change"]}
         for name, d in [("batch preprocessing", prep), *ops.items()]
         if d["mean"]["change_pct"] is not None and d["mean"]["change_pct"] > 0),
        key=lambda r: -round(r["change_pct"], 9))  # ties (to rounding: either engine's sums) keep pipeline order
    return {
        "batch_preprocessing_ms": prep,
        "ops_ms": ops,
        "batches": batches,
        "wait_share": {"a": wa, "b": wb, "change": None if wa is None or wb is None else wb - wa},
        "slower": slower,
    }
