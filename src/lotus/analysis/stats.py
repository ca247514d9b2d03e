"""Preprocessing statistics: batch preprocessing time and per-op times, in milliseconds.

``preprocessing_stats(batches)`` describes the batch preprocessing time (``prep_dur_ns``: a worker's
``fetch``, i.e. the original ``SBatchPreprocessed``); ``op_stats(events)`` describes every op per call:
``load`` (the study's "Loader", per sample), each transform op (per sample), ``transform`` and
``sample`` totals (per sample) and ``collate`` (the study's "Collation", per batch).

Each description has the keys of :data:`STAT_KEYS`: count, sum, mean, population std, std as % of the
mean, min, max, median, p25, p75, IQR, p90, p99 (percentiles with linear interpolation, as numpy and
pandas compute them).

Only batches count: a failed batch (its fetch raised) is left out of every statistic, and so are the
op events of failed and exhausted fetches (an exhausted fetch is no batch at all; see
:mod:`lotus.query.batches`). :func:`config_stats` reports how many there were.

Outliers (``remove_outliers=True``) follow the original Lotus rule: batches whose preprocessing time
is below ``q1 - 2 * IQR`` are dropped (meant for the last, partial batch of an epoch); their ops go
with them.
"""

from __future__ import annotations

import logging

import numpy as np

from lotus.analysis.describe import STAT_KEYS, describe_clean, describe_ms, outlier_floor_ns, stat_dict  # noqa: F401
from lotus.query import failed_mask

_log = logging.getLogger("lotus.analysis")

KEY = ["rank", "loader", "epoch", "batch_id"]
# built-in per-sample / per-batch parts of preprocessing, in pipeline order around the ops
LEAD_OPS = ("load",)
TAIL_OPS = ("transform", "sample", "collate")
PER_BATCH_OPS = ("collate",)  # recorded for every batch, whatever the detail budget: never scaled


def prepared(batches):
    """Batches with a known preprocessing time, failed ones left out."""
    ok = batches["prep_dur_ns"].notna().to_numpy(dtype=bool, na_value=False)
    return batches[ok & ~failed_mask(batches)]


def split_outliers(batches):
    """(kept, dropped) batches of the original outlier rule, applied to ``prep_dur_ns``."""
    b = prepared(batches)
    dur = b["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    floor = outlier_floor_ns(dur)
    if floor is None:
        return b, b.iloc[:0]
    low = dur < floor
    if low.any():
        _log.info("%d batch(es) below q1 - 2*IQR (%.1f ms) dropped as outliers", int(low.sum()), floor / 1e6)
    return b[~low], b[low]


def preprocessing_stats(batches, *, remove_outliers: bool = False, by: str | None = None) -> dict:
    """Statistics (ms) of batch preprocessing time; ``by`` (e.g. ``"rank"``) gives one per group."""
    from lotus.analysis import compact

    if compact.is_table(batches):
        return compact.preprocessing_stats(batches, remove_outliers=remove_outliers, by=by)
    b = split_outliers(batches)[0] if remove_outliers else prepared(batches)
    if by is None:
        return describe_ms(b["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan))
    return {_plain(k): describe_ms(g["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan))
            for k, g in b.groupby(by, sort=True)}


def op_engine(events):
    """The out-of-core engine of a scanned run (:mod:`lotus.query.scan`), or None for full events."""
    return getattr(events, "attrs", {}).get("op_engine")


def _excluded_keys(events, exclude):
    import pandas as pd

    from lotus.query import fetch_outcomes

    drop = [d[KEY] for d in (fetch_outcomes(events), exclude) if d is not None and len(d)]
    return pd.concat(drop, ignore_index=True) if drop else None


def op_names(events) -> list[str]:
    """Ops present in ``events``, in pipeline order: load, transform ops (by first occurrence), transform,
    sample, collate."""
    if op_engine(events) is not None:
        return op_engine(events).op_order()
    cat = events["name"].array
    codes = np.asarray(cat.codes)
    if codes.size == 0:
        return []
    present, first = np.unique(codes, return_index=True)
    labels = list(cat.categories)
    first_cat = np.asarray(events["cat"].array.take(first))
    found = {labels[c]: i for c, i in zip(present.tolist(), first.tolist(), strict=True)}
    is_op = {labels[c] for c, k in zip(present.tolist(), first_cat, strict=True) if k == "op"}
    ops = sorted((i, n) for n, i in found.items() if n in is_op)
    return ([n for n in LEAD_OPS if n in found] + [n for _, n in ops] + [n for n in TAIL_OPS if n in found])


def op_durations(events, *, exclude=None) -> dict[str, np.ndarray]:
    """Durations (ns) per op, in pipeline order, without the ops of failed and exhausted fetches.
    ``exclude``: more batches (rows with the batch key) to leave out."""
    import pandas as pd

    from lotus.query import fetch_outcomes

    names = op_names(events)
    if not names:
        return {}
    cat = events["name"].array
    codes = np.asarray(cat.codes)
    lookup = {n: i for i, n in enumerate(cat.categories)}
    dur = events["dur_ns"].to_numpy()
    drop = [d[KEY] for d in (fetch_outcomes(events), exclude) if d is not None and len(d)]
    keep = ~_rows_of_batches(events, pd.concat(drop, ignore_index=True)) if drop else None
    out = {}
    for n in names:
        mask = codes == lookup[n]
        if keep is not None:
            mask &= keep
        out[n] = dur[mask]
    return out


def _rows_of_batches(events, batches) -> np.ndarray:
    """Boolean mask of the events that belong to one of ``batches`` (matched on the batch key)."""
    import pandas as pd

    ids = batches["batch_id"].to_numpy()
    cand = np.flatnonzero(np.isin(events["batch_id"].to_numpy(), ids))
    mask = np.zeros(len(events), bool)
    if cand.size:
        sub = events.iloc[cand]
        idx = pd.MultiIndex.from_arrays([sub[k].to_numpy(np.int64) for k in KEY])
        want = pd.MultiIndex.from_arrays([batches[k].to_numpy(np.int64) for k in KEY])
        mask[cand[idx.isin(want)]] = True
    return mask


def op_table(events, *, exclude=None) -> dict[str, dict]:
    """Per op (pipeline order): count, sum_ns, mean_ns... from the engine of a scanned run (quantiles
    approximate: see :mod:`lotus.query.scan`)."""
    return op_engine(events).op_table(_excluded_keys(events, exclude))


def _describe_table(t: dict) -> dict:
    if not t.get("count"):
        return describe_ms([])
    d = {"count": t["count"], "sum": t["sum_ns"] / 1e6, "mean": t["mean_ns"] / 1e6, "std": t["std_ns"] / 1e6}
    d["std_pct"] = d["std"] / d["mean"] * 100 if d["mean"] else None
    d.update(min=t["min_ns"] / 1e6, max=t["max_ns"] / 1e6, median=t["median_ns"] / 1e6, p25=t["p25_ns"] / 1e6,
             p75=t["p75_ns"] / 1e6)
    d.update(iqr=d["p75"] - d["p25"], p90=t["p90_ns"] / 1e6, p99=t["p99_ns"] / 1e6)
    return {k: d[k] for k in STAT_KEYS}


def op_stats(events, *, exclude=None) -> dict[str, dict]:
    """Statistics (ms per call) of every op, in pipeline order (see the module doc).

    A trace whose per-sample/per-op detail was recorded for a share of its batches (the detail budget,
    :mod:`lotus.dataloader.budget`) is a sample of whole batches: the per-call statistics estimate the
    whole run's; ``count`` and ``sum`` are scaled to all batches (``count_sampled`` is what was recorded)
    and ``sampled_share`` and ``mean_ci95`` (ms, the mean's 95% interval over the sampled batches) are
    added. A trace in full detail gets neither key."""
    from lotus.query import detail_share

    scanned = op_engine(events) is not None
    if scanned:
        out = {n: _describe_table(t) for n, t in op_table(events, exclude=exclude).items()}
    else:
        out = {n: describe_ms(d) for n, d in op_durations(events, exclude=exclude).items()}
    share = detail_share(events) if out else 1.0
    if share < 1.0:
        names = [n for n in out if n not in PER_BATCH_OPS]
        ci = (op_engine(events).op_mean_ci95_ms(names, _excluded_keys(events, exclude)) if scanned
              else op_mean_ci95_ms(events, names, exclude=exclude))
        for n, st in out.items():
            if n in PER_BATCH_OPS:
                continue
            st["count_sampled"] = st["count"]
            if st["count"]:  # else no detail batch succeeded (share 0): nothing recorded, nothing to scale
                st["count"] = round(st["count"] / share)
                st["sum"] = None if st["sum"] is None else st["sum"] / share
            st["sampled_share"] = share
            st["mean_ci95"] = ci.get(n)
    return out


def op_mean_ci95_ms(events, names: list[str], *, exclude=None) -> dict[str, list[float] | None]:
    """95% interval (ms) of each op's mean per call, treating the batches as the sampled units (ratio
    estimator: sum of the op's time over its calls, batch by batch; normal approximation). None for an op
    seen in fewer than two batches."""
    import pandas as pd

    from lotus.query import fetch_outcomes

    cat = events["name"].array
    codes = np.asarray(cat.codes)
    lookup = {n: i for i, n in enumerate(cat.categories)}
    drop = [d[KEY] for d in (fetch_outcomes(events), exclude) if d is not None and len(d)]
    keep = ~_rows_of_batches(events, pd.concat(drop, ignore_index=True)) if drop else np.ones(len(events), bool)
    out: dict[str, list[float] | None] = {}
    for n in names:
        mask = (codes == lookup[n]) & keep
        part = pd.DataFrame({k: events[k].to_numpy()[mask] for k in [*KEY, "pid"]})
        part["d"] = events["dur_ns"].to_numpy()[mask].astype(np.float64)
        g = part.groupby([*KEY, "pid"], sort=False)["d"].agg(["sum", "count"])
        k = len(g)
        if k < 2:
            out[n] = None
            continue
        total, calls = g["sum"].to_numpy(), g["count"].to_numpy().astype(np.float64)
        mean = total.sum() / calls.sum()
        se = np.sqrt(np.sum((total - mean * calls) ** 2) / (k * (k - 1))) / calls.mean()
        out[n] = [max(float((mean - 1.96 * se) / 1e6), 0.0), float((mean + 1.96 * se) / 1e6)]  # a time: >= 0
    return out


def op_totals_s(events) -> dict[str, float]:
    """CPU seconds spent in each op (sum of durations), pipeline order; a trace with per-op detail for a
    share of its batches is scaled to all of them."""
    from lotus.query import detail_share

    if op_engine(events) is not None:
        sums = {n: t.get("sum_ns", 0.0) for n, t in op_table(events).items()}
    else:
        sums = {n: float(d.sum()) for n, d in op_durations(events).items()}
    share = detail_share(events) if sums else 1.0
    return {n: s / 1e9 / (1.0 if n in PER_BATCH_OPS else share) if s else 0.0 for n, s in sums.items()}


def config_stats(events, batches, *, remove_outliers: bool = False) -> dict:
    """``{"batch_preprocessing_ms": {...}, "ops_ms": {op: {...}}, "outliers_removed": n, "outcomes": {...}}``
    of one run (``outcomes``: :func:`lotus.query.outcomes.outcome_summary`, failed and exhausted fetches);
    ``batches``: a DataFrame or a scanned run's compact table (:mod:`lotus.analysis.compact`)."""
    from lotus.analysis import compact
    from lotus.query import outcome_summary

    if compact.is_table(batches):
        return _table_config_stats(events, batches, remove_outliers=remove_outliers)

    if remove_outliers:
        kept, dropped = split_outliers(batches)
    else:
        kept, dropped = prepared(batches), batches.iloc[:0]
    return {
        "batch_preprocessing_ms": describe_ms(kept["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)),
        "ops_ms": op_stats(events, exclude=dropped if len(dropped) else None),
        "outliers_removed": len(dropped),
        "outcomes": outcome_summary(batches),
    }


def _table_config_stats(events, t, *, remove_outliers: bool = False) -> dict:
    from lotus.analysis.compact import _described, prepared_streams

    streams, dropped = prepared_streams(t, remove_outliers)
    return {
        "batch_preprocessing_ms": _described(streams[None]),
        "ops_ms": op_stats(events, exclude=t.key_frame(dropped) if len(dropped) else None),
        "outliers_removed": len(dropped),
        "outcomes": t.outcome_summary(),
    }


def stats_table(stats_by_config: dict[str, dict]):
    """Long table of :func:`config_stats` results: one row per (config, what, name)."""
    import pandas as pd

    rows = []
    sampled = False
    for cfg, st in stats_by_config.items():
        rows.append({"config": cfg, "what": "batch", "name": "batch preprocessing", **st["batch_preprocessing_ms"]})
        for op, d in st["ops_ms"].items():
            row = {"config": cfg, "what": "op", "name": op, **{k: d.get(k) for k in STAT_KEYS}}
            if "sampled_share" in d:  # per-op detail for a share of the batches (the detail budget)
                sampled = True
                ci = d.get("mean_ci95") or [None, None]
                row.update(sampled_share=d["sampled_share"], mean_ci95_lo=ci[0], mean_ci95_hi=ci[1])
            rows.append(row)
    extra = ["sampled_share", "mean_ci95_lo", "mean_ci95_hi"] if sampled else []
    return pd.DataFrame(rows, columns=["config", "what", "name", *STAT_KEYS, *extra])


def _plain(v):
    return v.item() if hasattr(v, "item") else v
