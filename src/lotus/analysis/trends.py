"""Trends of a long run: per epoch and per time bucket (an hour by default), not one average.

``trends(events, batches)`` -> ``{"bucket_s": s, "per_epoch": [...], "per_bucket": [...]}``:

* per epoch: consumed batches, samples/s of the main loader (samples after the epoch's first hand-off
  / time from it to the last one, summed over ranks), the loop's wait share (as the verdict's, per
  epoch) and the slowest op (largest total time; share of that epoch's preprocessing time). On a
  scanned run (:mod:`lotus.trace.scan`) op totals per epoch come from the engine and include the ops
  of failed and exhausted fetches (rare; the in-memory path leaves them out).
* per bucket (``bucket_s``: 3600 for runs of two hours or more, else a twelfth of the run): consumed
  batches, samples/s (samples handed to the loop in the bucket / its length) and wait share (waits
  starting in the bucket / its length, per rank, averaged).

From the batches table and per-op totals only: bounded memory whatever the run's length.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.diagnosis import _NOT_OPS, loop_spans
from lotus.analysis.stats import op_engine, prepared
from lotus.trace.batches import ok_batches

HOUR_S = 3600.0


def _epoch_op_totals(events) -> dict[int, dict[str, float]]:
    engine = op_engine(events)
    if engine is not None:
        return engine.epoch_totals()
    from lotus.analysis.stats import op_names

    out: dict[int, dict[str, float]] = {}
    names = op_names(events)
    if not names:
        return out
    from lotus.analysis.stats import _excluded_keys, _rows_of_batches

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
        return out
    lo = int(ep.min())
    k = len(labels)
    sums = np.bincount((ep - lo) * k + codes[sel], weights=events["dur_ns"].to_numpy()[sel].astype(np.float64),
                       minlength=(int(ep.max()) - lo + 1) * k).reshape(-1, k)
    for i, j in zip(*np.nonzero(sums), strict=True):
        out.setdefault(lo + int(i), {})[labels[j]] = float(sums[i, j])
    return out


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
    ops = _epoch_op_totals(events)
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
        tot = {k: v for k, v in ops.get(int(e), {}).items() if k not in _NOT_OPS}
        slow = max(tot, key=tot.get) if tot else None
        pt = float(prep_by_epoch.get(e, 0) or 0)
        per_epoch.append({"epoch": int(e), "batches": len(g), "samples_per_s": rate or None, "wait_share": share,
                          "slowest_op": slow, "slowest_op_share": tot[slow] / pt if slow and pt else None})
    t0, t1 = int(t.min()), int(t.max())
    length = (t1 - t0) / 1e9
    if bucket_s is None:
        bucket_s = HOUR_S if length >= 2 * HOUR_S else max(length / 12, 1e-3)
    width = max(int(bucket_s * 1e9), 1)
    nb = max(1, -(-(t1 - t0) // width))
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
        per_bucket.append({"start_s": i * bucket_s, "batches": int(sel.sum()),
                           "samples_per_s": float(np.nansum(n[sel])) / span,
                           "wait_share": None if waits is None else waits / (span * 1e9 * ranks)})
    return {"bucket_s": bucket_s, "per_epoch": per_epoch, "per_bucket": per_bucket}
