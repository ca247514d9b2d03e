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


_BITS = (11, 8, 12, 32)  # a packed key's bits of rank, loader, epoch, batch_id (63 in all)


def _prepared_keys(table) -> tuple[np.ndarray, np.ndarray] | None:
    """(packed keys, prep ns as float64) of a scanned run's prepared batches (:func:`prepared`, in the
    table's key order), or None where a key does not pack into 63 bits: ``rank, loader, epoch, batch_id``,
    non-negative, below 2**11, 2**8, 2**12, 2**32."""
    b = prepared(table.frame([*KEY, "failed", "prep_dur_ns"]))
    key = np.zeros(len(b), np.int64)
    for c, bits in zip(KEY, _BITS, strict=True):
        v = b[c].to_numpy(np.int64)
        if len(v) and (int(v.min()) < 0 or int(v.max()) >= 1 << bits):
            return None
        key = (key << bits) | v
    return key, b["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)


def top_candidates(values: np.ndarray, top: int) -> np.ndarray:
    """Indices (in order) of the rows of ``values`` (no NaN) among which a stable descending sort's first
    ``top`` rows are, in the same order: every row above the ``top``-th largest value (fewer than ``top``),
    then the first of those equal to it (the stable sort keeps their order)."""
    if top <= 0 or not len(values):
        return np.zeros(0, np.int64)
    k = len(values) - min(top, len(values))
    least = np.partition(values, k)[k]
    above = values > least
    equal = np.flatnonzero(values == least)[: max(top - int(above.sum()), 0)]
    return np.union1d(np.flatnonzero(above), equal)


def _table_changes(a_table, b_table, top: int) -> tuple[np.ndarray, dict, dict] | None:
    """What :func:`diff_runs` reads of :func:`batch_changes` and of the prepared batches, for two scanned
    runs' tables, without the merged DataFrame: (A's prep ns, B's prep ns, the ``batches`` counts and
    most slowed-down batches); None where a key does not pack or the keys are not in order (then the
    DataFrames' merge). The same values: an inner merge on unique keys in A's order (pandas' ``how="inner"``
    keeps the left keys' order), the same arithmetic, and the most slowed ones sorted as there among the
    rows at least as slowed as the ``top``-th."""
    import pandas as pd

    ka = _prepared_keys(a_table)
    kb = _prepared_keys(b_table) if ka is not None else None
    if ka is None or kb is None:
        return None
    (ka, pa), (kb, pb) = ka, kb
    if np.any(ka[1:] <= ka[:-1]) or np.any(kb[1:] <= kb[:-1]):
        return None
    pos = np.searchsorted(kb, ka).clip(0, max(len(kb) - 1, 0))
    ia = np.flatnonzero(kb[pos] == ka) if len(kb) else np.zeros(0, np.int64)
    ib = pos[ia]
    del pos
    a, b = pa[ia] / 1e6, pb[ib] / 1e6
    ch = b - a
    ok = ~np.isnan(ch)
    c_ok = ch[ok]
    slowest = []
    if top > 0 and len(c_ok):
        cand = np.flatnonzero(ok)[top_candidates(c_ok, top)]
        keys = ka[ia[cand]]
        cols = {}
        for i, (c, bits) in enumerate(zip(KEY, _BITS, strict=True)):  # unpacked: rank in the highest bits
            cols[c] = (keys >> sum(_BITS[i + 1:])) & ((1 << bits) - 1)
        m = pd.DataFrame({**cols, "prep_a_ms": a[cand], "prep_b_ms": b[cand], "prep_change_ms": ch[cand]})
        m = m.sort_values("prep_change_ms", ascending=False, kind="stable").head(top)
        slowest = [{**{k: int(r[k]) for k in KEY}, "a_ms": float(r["prep_a_ms"]), "b_ms": float(r["prep_b_ms"]),
                    "change_ms": float(r["prep_change_ms"])} for _, r in m.iterrows() if r["prep_change_ms"] > 0]
    counts = {
        "matched": int(ok.sum()),
        "only_in_a": int(len(ka) - len(ia)),
        "only_in_b": int(len(kb) - len(ia)),
        "slower": int((c_ok > 0).sum()),
        "faster": int((c_ok < 0).sum()),
        "median_change_ms": float(np.median(c_ok)) if ok.any() else None,
        "most_slowed": slowest,
    }
    return pa, pb, counts


def _wait_share(batches) -> float | None:
    spans = loop_spans(batches)
    total = float(spans["span_ns"].sum()) if len(spans) else 0.0
    return float(spans["wait_ns"].sum()) / total if total > 0 else None


def _frame_changes(a_batches, b_batches, top: int) -> tuple[dict, dict]:
    """The preprocessing comparison and the ``batches`` counts of two batches DataFrames (the merge)."""
    prep = _compare(describe_ms(prepared(a_batches)["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)),
                    describe_ms(prepared(b_batches)["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)))
    matched = batch_changes(a_batches, b_batches)
    ch = matched["prep_change_ms"].to_numpy()
    ok = ~np.isnan(ch)
    slowest = matched[ok].sort_values("prep_change_ms", ascending=False, kind="stable").head(top)
    return prep, {
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


def diff_runs(a_events, a_batches, b_events, b_batches, *, top: int = 10) -> dict:
    """Changes from run A to run B (see the module doc)."""
    ops_a, ops_b = op_stats(a_events), op_stats(b_events)  # either engine (lotus.analysis.runs)
    tables = a_batches, b_batches  # loop spans and outcomes: of a table itself where there is one
    ops = {}
    for name in list(dict.fromkeys([*ops_a, *ops_b])):
        ops[name] = _compare(ops_a.get(name) or describe_ms([]), ops_b.get(name) or describe_ms([]))
    both = compact.is_table(a_batches) and compact.is_table(b_batches) and not a_batches.partial \
        and not b_batches.partial
    found = _table_changes(a_batches, b_batches, top) if both and top >= 0 else None
    if found is not None:  # two scanned runs: matched on packed keys, no merged DataFrame
        pa, pb, batches = found
        prep = _compare(describe_ms(pa), describe_ms(pb))
        del pa, pb, found
    else:
        prep, batches = _frame_changes(_frame(a_batches), _frame(b_batches), top)
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
