"""Trends of a long run: per epoch and per time bucket (an hour by default), not one average.

``trends(events, batches)`` -> ``{"bucket_s": s, "per_epoch": [...], "per_bucket": [...]}``:

* per epoch: consumed batches, samples/s of the main loader (samples after the epoch's first hand-off
  / time from it to the last one, summed over ranks), the loop's wait share (as the verdict's, per
  epoch) and the slowest op (largest total time; share of that epoch's preprocessing time).
* per bucket (``bucket_s``: 3600 for runs of two hours or more, else a twelfth of the run): consumed
  batches, samples/s (samples handed to the loop in the bucket / its length), wait share (waits
  starting in the bucket / its length, per rank, averaged) and the slowest op (ops by their start;
  share of the preprocessing of the main loader's batches that started in the bucket).

Op totals leave out the ops of failed and exhausted fetches, on both engines; a scanned run
(:mod:`lotus.trace.scan`) reads its op records again in chunks for them (integer sums: the same
figures). From the batches table and per-op totals only: bounded memory whatever the run's length.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.diagnosis import _NOT_OPS, loop_spans
from lotus.analysis.stats import op_engine, prepared
from lotus.trace.batches import ok_batches

HOUR_S = 3600.0


def _op_totals(events, t0: int, width: int, nb: int) -> tuple[dict[int, dict[str, float]], list[dict[str, float]]]:
    """``({epoch: {op: total ns}}, [{op: total ns} per bucket])``: every op event but those of failed and
    exhausted fetches, its bucket that of its start (clipped to the first and last); ops in the order of
    their codes (the events' name categories). Integer totals (exact in float64 below 2**53 ns), so a
    scanned run's pass over its files (:func:`lotus.trace.rescan._op_chunks`) gives the in-memory
    path's figures."""
    from lotus.analysis.stats import _excluded_keys

    engine = op_engine(events)
    if engine is None:
        return _op_totals_memory(events, t0, width, nb)
    from lotus.trace.rescan import _op_chunks

    slots = len(engine.slot_codes)
    by_epoch: dict[int, np.ndarray] = {}
    by_bucket = np.zeros(nb * slots)
    for arr, slot, keep, fs in _op_chunks(engine, _excluded_keys(events, None)):
        ki = np.flatnonzero(keep)
        if not ki.size:
            continue
        sl, d = slot[ki].astype(np.int64), arr["dur_ns"][ki].astype(np.float64)
        kb = np.clip((arr["start_ns"][ki] + fs.shift - t0) // width, 0, nb - 1)
        by_bucket += np.bincount(kb * slots + sl, weights=d, minlength=nb * slots)
        ep = arr["epoch"][ki].astype(np.int64)
        lo = int(ep.min())
        sums = np.bincount((ep - lo) * slots + sl, weights=d, minlength=(int(ep.max()) - lo + 1) * slots)
        for i, row in enumerate(sums.reshape(-1, slots)):
            if row.any():
                acc = by_epoch.setdefault(lo + i, np.zeros(slots))
                acc += row
    order = np.argsort(engine.slot_codes, kind="stable")  # by code: the in-memory path's order
    names = [engine.names[engine.slot_codes[k]] for k in order]

    def named(row):
        return {n: float(v) for n, v in zip(names, row[order].tolist(), strict=True) if v}

    return ({e: named(r) for e, r in sorted(by_epoch.items()) if r.any()},
            [named(r) for r in by_bucket.reshape(nb, slots)])


def _op_totals_memory(events, t0: int, width: int, nb: int):
    from lotus.analysis.stats import _excluded_keys, _rows_of_batches, op_names

    names = op_names(events)
    if not names:
        return {}, [{} for _ in range(nb)]
    drop = _excluded_keys(events, None)
    keep = ~_rows_of_batches(events, drop) if drop is not None else None
    cat = events["name"].array
    codes = np.asarray(cat.codes).astype(np.int64)
    labels = [str(c) for c in cat.categories]
    want = np.zeros(len(labels) + 1, bool)
    want[[labels.index(n) for n in names]] = True
    sel = want[codes]
    if keep is not None:
        sel &= keep
    ep = events["epoch"].to_numpy()[sel].astype(np.int64)
    if not len(ep):
        return {}, [{} for _ in range(nb)]
    k = len(labels)
    c, d = codes[sel], events["dur_ns"].to_numpy()[sel].astype(np.float64)
    lo = int(ep.min())
    sums = np.bincount((ep - lo) * k + c, weights=d, minlength=(int(ep.max()) - lo + 1) * k).reshape(-1, k)
    per_epoch: dict[int, dict[str, float]] = {}
    for i, j in zip(*np.nonzero(sums), strict=True):
        per_epoch.setdefault(lo + int(i), {})[labels[j]] = float(sums[i, j])
    kb = np.clip((events["start_ns"].to_numpy()[sel].astype(np.int64) - t0) // width, 0, nb - 1)
    bs = np.bincount(kb * k + c, weights=d, minlength=nb * k).reshape(nb, k)
    return per_epoch, [{labels[j]: float(row[j]) for j in np.flatnonzero(row)} for row in bs]


def _slowest(totals: dict[str, float], prep_ns: float) -> tuple[str | None, float | None]:
    tot = {k: v for k, v in totals.items() if k not in _NOT_OPS}
    slow = max(tot, key=tot.get) if tot else None
    return slow, (tot[slow] / prep_ns if slow and prep_ns else None)


def trends(events, batches, *, bucket_s: float | None = None) -> dict:
    b = ok_batches(batches)
    b = b[b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    if b.empty:
        return {"bucket_s": bucket_s, "per_epoch": [], "per_bucket": []}
    main = int(b.groupby("loader").size().idxmax())
    b = b[b["loader"] == main]
    t = b["consumed_ns"].to_numpy(np.int64)
    n = b["n_samples"].to_numpy(dtype=np.float64, na_value=np.nan)
    spans = loop_spans(batches)
    spans = spans[spans["loader"] == main] if len(spans) else spans
    t0, t1 = int(t.min()), int(t.max())
    length = (t1 - t0) / 1e9
    if bucket_s is None:
        bucket_s = HOUR_S if length >= 2 * HOUR_S else max(length / 12, 1e-3)
    width = max(int(bucket_s * 1e9), 1)
    nb = max(1, -(-(t1 - t0) // width))
    ops, bucket_ops = _op_totals(events, t0, width, nb)
    prep = prepared(batches)
    prep_by_epoch = prep[prep["loader"] == main].groupby("epoch")["prep_dur_ns"].sum()
    per_epoch = []
    for e, g in b.groupby("epoch", sort=True):
        rate = 0.0
        for _, r in g.groupby("rank"):
            r = r.sort_values("consumed_ns")
            tt = r["consumed_ns"].to_numpy(np.int64)
            if len(tt) > 1 and tt[-1] > tt[0]:
                rate += float(np.nansum(r["n_samples"].to_numpy(dtype=np.float64, na_value=np.nan)[1:])) / (
                    (tt[-1] - tt[0]) / 1e9)
        s = spans[spans["epoch"] == e] if len(spans) else spans
        share = float(s["wait_ns"].sum()) / float(s["span_ns"].sum()) if len(s) and s["span_ns"].sum() > 0 else None
        slow, slow_share = _slowest(ops.get(int(e), {}), float(prep_by_epoch.get(e, 0) or 0))
        per_epoch.append({"epoch": int(e), "batches": len(g), "samples_per_s": rate or None, "wait_share": share,
                          "slowest_op": slow, "slowest_op_share": slow_share})
    pm = prep[prep["loader"] == main]
    ps = pm["prep_start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    pd_ = pm["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    okp = np.isfinite(ps) & np.isfinite(pd_)
    prep_by_bucket = np.bincount(np.clip((ps[okp].astype(np.int64) - t0) // width, 0, nb - 1), weights=pd_[okp],
                                 minlength=nb)
    k = np.minimum((t - t0) // width, nb - 1)
    ranks = max(b["rank"].nunique(), 1)
    ws = b["wait_start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    wd = b["wait_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    per_bucket = []
    for i in range(nb):
        sel = k == i
        lo = t0 + i * width
        span = min(width, max(t1 - lo, 1)) / 1e9
        in_b = (ws >= lo) & (ws < lo + width)
        waits = float(np.nansum(wd[in_b])) if np.isfinite(ws).any() else None
        slow, slow_share = _slowest(bucket_ops[i], float(prep_by_bucket[i]))
        per_bucket.append({"start_s": i * bucket_s, "batches": int(sel.sum()),
                           "samples_per_s": float(np.nansum(n[sel])) / span,
                           "wait_share": None if waits is None else waits / (span * 1e9 * ranks),
                           "slowest_op": slow, "slowest_op_share": slow_share})
    return {"bucket_s": bucket_s, "per_epoch": per_epoch, "per_bucket": per_bucket}
