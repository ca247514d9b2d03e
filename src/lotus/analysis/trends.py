"""Trends of a long run: per epoch and per time bucket (an hour by default), not one average.

``trends(events, batches)`` -> ``{"bucket_s": s, "per_epoch": [...], "per_bucket": [...]}``, the rows of the
main loader (the one that handed out the most batches):

* per epoch: consumed batches, samples/s (per rank: the samples handed out after the epoch's first
  hand-off / the time from it to the last one; ranks added), the loop's wait share (as the verdict's,
  per epoch) and the slowest op (largest total time; its share of the preprocessing of the same batches);
* per bucket (``bucket_s``: 3600 for runs of two hours or more, else a twelfth of the run; buckets start
  at the first hand-off): consumed batches, samples/s (samples handed out in the bucket / the part of
  it the run covers), the wait share (the loop's waits inside the bucket / that part, per rank, averaged)
  and the slowest op.

Rates follow :mod:`lotus.analysis.windowrate`: a window with fewer than ``MIN_HANDOFFS`` hand-offs of a rank,
or a bucket the run covers less than ``MIN_COVER`` of, has no rate (``samples_per_s`` None, ``note`` says
why; the wait share of such a bucket is None too); a row's ``ci95`` is None, the trends' ``rate_note``
says why. The slowest op of an epoch or bucket is over the main loader's successful detail batches of it
(a bucket: those that *started* in it), its share of their preprocessing time: an op of a batch is part
of that batch's preprocessing, so a share is never above 1, with per-op detail for a share of the batches
too. A scanned run (:mod:`lotus.query.scan`) reads its op records again in chunks (integer sums: the same
figures), unless its scan kept per-batch op sums (:mod:`lotus.query.opreduce`, ``lotus report``): those
are then added up by bucket, with no pass over the files (the same integer sums). From the batches table
and per-op totals only: bounded memory whatever the run's length.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis.diagnosis import _NOT_OPS, loop_spans
from lotus.analysis.stats import op_engine
from lotus.analysis.windowrate import MIN_COVER, NO_INTERVAL, between_rate, count_rate
from lotus.query import failed_mask

HOUR_S = 3600.0
_LOOP_COLUMNS = ("rank", "epoch", "consumed_ns", "n_samples", "wait_start_ns", "wait_dur_ns")
_PREP_COLUMNS = ("rank", "epoch", "batch_id", "prep_start_ns", "prep_dur_ns")


class _Slots:
    """Each of the main loader's successful detail batches -> its epoch and the bucket it started in."""

    def __init__(self, b, t0: int, width: int, nb: int):
        self.by_rank: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        bucket = _buckets(b, t0, width, nb)
        for rank, idx in b.groupby("rank", sort=True).indices.items():
            key = self.pack(b["epoch"].to_numpy(np.int64)[idx], b["batch_id"].to_numpy(np.int64)[idx])
            order = np.argsort(key, kind="stable")
            self.by_rank[int(rank)] = (key[order], bucket[idx][order])

    @staticmethod
    def pack(epoch: np.ndarray, batch_id: np.ndarray) -> np.ndarray:
        return (epoch.astype(np.int64) << 32) | (batch_id.astype(np.int64) & 0xFFFFFFFF)

    def bucket_of(self, rank: int, epoch: np.ndarray, batch_id: np.ndarray) -> np.ndarray:
        """The bucket of each (epoch, batch id) of ``rank``; -1 where it is none of the batches."""
        keys, buckets = self.by_rank.get(int(rank), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        out = np.full(len(epoch), -1, np.int64)
        if not len(keys) or not len(epoch):
            return out
        want = self.pack(epoch, batch_id)
        i = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        hit = keys[i] == want
        out[hit] = buckets[i[hit]]
        return out


def _add(acc: dict, epoch: np.ndarray, bucket: np.ndarray, code: np.ndarray, dur: np.ndarray, nb: int) -> None:
    """Sum op durations into ``acc["epoch"][e][code]`` and ``acc["bucket"][bucket * K + code]`` (exact
    integer sums in float64 below 2**53 ns)."""
    if not len(code):
        return
    k = acc["k"]
    acc["bucket"] += np.bincount(bucket * k + code, weights=dur, minlength=nb * k)
    lo = int(epoch.min())
    sums = np.bincount((epoch - lo) * k + code, weights=dur, minlength=(int(epoch.max()) - lo + 1) * k)
    for i, row in enumerate(sums.reshape(-1, k)):
        if row.any():
            acc["epoch"].setdefault(lo + i, np.zeros(k))[:] += row


def _op_totals(events, slots: _Slots, main: int, nb: int) -> tuple[dict, list]:
    """``({epoch: {op: ns}}, [{op: ns} per bucket])`` over the op events of the batches in ``slots``."""
    engine = op_engine(events)
    if engine is None:
        from lotus.analysis.stats import op_names

        names = op_names(events)
        labels = [str(c) for c in events["name"].array.categories]
        acc = {"k": len(labels), "epoch": {}, "bucket": np.zeros(nb * len(labels))}
        if names:
            want = np.zeros(len(labels) + 1, bool)
            want[[labels.index(n) for n in names]] = True
            codes = np.asarray(events["name"].array.codes).astype(np.int64)
            sel = want[codes] & (events["loader"].to_numpy() == main)
            ev = events[sel]
            for rank, idx in ev.groupby("rank", sort=True).indices.items():
                ep = ev["epoch"].to_numpy(np.int64)[idx]
                bk = slots.bucket_of(rank, ep, ev["batch_id"].to_numpy(np.int64)[idx])
                hit = bk >= 0
                _add(acc, ep[hit], bk[hit], codes[sel][idx][hit], ev["dur_ns"].to_numpy(np.float64)[idx][hit], nb)
        order = list(range(len(labels)))
    elif getattr(getattr(engine, "op_reduce", None), "batch_sums", lambda: None)() is not None:
        labels = [engine.names[c] for c in engine.slot_codes]
        acc = _reduced_totals(engine.op_reduce.batch_sums(), slots, main, nb, len(labels))
        order = np.argsort(engine.slot_codes, kind="stable").tolist()
    else:
        from lotus.query import op_chunks

        labels = [engine.names[c] for c in engine.slot_codes]
        acc = {"k": len(labels), "epoch": {}, "bucket": np.zeros(nb * len(labels))}
        for arr, slot, keep, fs in op_chunks(engine, None):
            sel = keep & (arr["loader"].astype(np.int64) + fs.loader_offset == main)
            ki = np.flatnonzero(sel)
            if not ki.size:
                continue
            ep = arr["epoch"][ki].astype(np.int64)
            bk = slots.bucket_of(fs.consts["rank"], ep, arr["batch_id"][ki])
            hit = bk >= 0
            _add(acc, ep[hit], bk[hit], slot[ki][hit].astype(np.int64), arr["dur_ns"][ki][hit].astype(np.float64), nb)
        order = np.argsort(engine.slot_codes, kind="stable").tolist()  # by code: the in-memory path's order

    def named(row):
        return {labels[j]: float(row[j]) for j in order if row[j]}

    return ({e: named(r) for e, r in sorted(acc["epoch"].items()) if r.any()},
            [named(r) for r in acc["bucket"].reshape(nb, acc["k"])])


def _reduced_totals(blocks, slots: _Slots, main: int, nb: int, k: int) -> dict:
    """:func:`_op_totals`' sums from the scan's per-batch op sums (integers: the same sums, any order)."""
    acc = {"k": k, "epoch": {}, "bucket": np.zeros(nb * k)}
    for (rank, loader, epoch), ids, sums in blocks:
        if loader != main:
            continue
        bk = slots.bucket_of(rank, np.full(ids.size, epoch, np.int64), ids)
        hit = bk >= 0
        if not hit.any():
            continue
        rows = np.zeros((int(hit.sum()), k), np.int64)
        w = min(k, sums.shape[1])
        rows[:, :w] = sums[hit, :w]
        flat = (bk[hit][:, None] * k + np.arange(k)[None, :]).ravel()
        acc["bucket"] += np.bincount(flat, weights=rows.ravel().astype(np.float64), minlength=nb * k)
        row = rows.sum(axis=0).astype(np.float64)
        if row.any():
            acc["epoch"].setdefault(int(epoch), np.zeros(k))[:] += row
    return acc


def _slowest(totals: dict[str, float], prep_ns: float) -> tuple[str | None, float | None]:
    tot = {k: v for k, v in totals.items() if k not in _NOT_OPS}
    slow = max(tot, key=tot.get) if tot else None
    return slow, (tot[slow] / prep_ns if slow and prep_ns else None)


def _loops(b, sel=None) -> dict:
    """``{"rank R": (sorted hand-off ns, samples)}`` of the batches (``sel``: a mask of them)."""
    if sel is not None:
        b = b[sel]
    out = {}
    for rank, g in b.groupby("rank", sort=True):
        g = g.sort_values("consumed_ns", kind="stable")
        out[f"rank {rank}"] = (g["consumed_ns"].to_numpy(np.int64),
                               g["n_samples"].to_numpy(dtype=np.float64, na_value=np.nan))
    return out


def _row(head: dict, rate, **tail) -> dict:
    return {**head, "samples_per_s": rate.samples_per_s, "ci95": None, "note": rate.note, **tail}


def _clipped_waits(b, lo: int, hi: int) -> float | None:
    """The loop's waiting time inside ``[lo, hi)``, all ranks (None: no wait recorded). In integer ns:
    wall-clock ns in float64 are 256 ns apart."""
    known = (b["wait_start_ns"].notna() & b["wait_dur_ns"].notna()).to_numpy(dtype=bool, na_value=False)
    if not known.any():
        return None
    ws = b["wait_start_ns"].to_numpy(dtype=np.int64, na_value=0)[known]
    we = ws + b["wait_dur_ns"].to_numpy(dtype=np.int64, na_value=0)[known]
    return float(np.clip(np.minimum(we, hi) - np.maximum(ws, lo), 0, None).sum())


def trends(events, batches, *, bucket_s: float | None = None) -> dict:
    """The trends (module doc); ``batches``: the batches DataFrame or a scanned run's compact table
    (:mod:`lotus.analysis.compact`: DataFrames of only the columns and rows read are made from it, and the
    loop's spans come from the table itself; never the whole batches DataFrame)."""
    from lotus.analysis import compact

    source = batches
    table = compact.is_table(batches)
    if table:  # the masks from a few columns, then each DataFrame of its rows only
        batches = batches.frame(["loader", "failed", "detail", "consumed_ns", "prep_dur_ns"])
    ok = ~failed_mask(batches)
    used = ok & batches["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)
    if not used.any():
        return {"bucket_s": bucket_s, "rate_note": NO_INTERVAL, "per_epoch": [], "per_bucket": []}
    loader = batches["loader"]
    main = int(loader[used].groupby(loader[used]).size().idxmax())
    is_main = (loader == main).to_numpy(dtype=bool, na_value=False)
    rows = used & is_main
    prep_rows = (ok & is_main & batches["prep_dur_ns"].notna().to_numpy(dtype=bool, na_value=False)
                 & batches["detail"].to_numpy(dtype=bool, na_value=False))
    if table:
        del batches, loader
        b = source.frame(list(_LOOP_COLUMNS), rows=rows)
        prep = source.frame(list(_PREP_COLUMNS), rows=prep_rows)
    else:  # one copy each, of the columns read
        b = batches.loc[rows, list(_LOOP_COLUMNS)]
        prep = batches.loc[prep_rows, list(_PREP_COLUMNS)]
        del batches, loader
    del ok, used, is_main, rows, prep_rows
    t = b["consumed_ns"].to_numpy(np.int64)
    spans = loop_spans(source)
    spans = spans[spans["loader"] == main] if len(spans) else spans
    t0, t1 = int(t.min()), int(t.max())
    length = (t1 - t0) / 1e9
    if bucket_s is None:
        bucket_s = HOUR_S if length >= 2 * HOUR_S else max(length / 12, 1e-3)
    width = max(int(bucket_s * 1e9), 1)
    nb = max(1, -(-(t1 - t0) // width))
    slots = _Slots(prep, t0, width, nb)
    ops, bucket_ops = _op_totals(events, slots, main, nb)
    pd_ = prep["prep_dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    prep_by_epoch = prep.groupby("epoch")["prep_dur_ns"].sum()
    prep_by_bucket = np.bincount(_buckets(prep, t0, width, nb), weights=pd_, minlength=nb)
    per_epoch = []
    ep = b["epoch"].to_numpy()
    for e in np.unique(ep):
        s = spans[spans["epoch"] == e] if len(spans) else spans
        share = float(s["wait_ns"].sum()) / float(s["span_ns"].sum()) if len(s) and s["span_ns"].sum() > 0 else None
        slow, slow_share = _slowest(ops.get(int(e), {}), float(prep_by_epoch.get(e, 0) or 0))
        per_epoch.append(_row({"epoch": int(e), "batches": int((ep == e).sum())}, between_rate(_loops(b, ep == e)),
                              wait_share=share, slowest_op=slow, slowest_op_share=slow_share))
    k = np.minimum((t - t0) // width, nb - 1)
    ranks = max(b["rank"].nunique(), 1)
    per_bucket = []
    for i in range(nb):
        lo = t0 + i * width
        rate = count_rate(_loops(b, k == i), lo, lo + width, t1 + 1 if i == nb - 1 else lo + width)
        covered = min(width, t1 + 1 - lo) if i == nb - 1 else width
        waits = _clipped_waits(b, lo, lo + covered) if covered >= MIN_COVER * width else None
        slow, slow_share = _slowest(bucket_ops[i], float(prep_by_bucket[i]))
        per_bucket.append(_row({"start_s": i * bucket_s, "batches": int((k == i).sum())}, rate,
                               wait_share=None if waits is None else waits / (covered * ranks),
                               slowest_op=slow, slowest_op_share=slow_share))
    return {"bucket_s": bucket_s, "rate_note": NO_INTERVAL, "per_epoch": per_epoch, "per_bucket": per_bucket}


def _buckets(b, t0: int, width: int, nb: int) -> np.ndarray:
    """The bucket each batch started in (its preprocessing's start; the first bucket before the first
    hand-off)."""
    start = b["prep_start_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    return np.clip((np.nan_to_num(start, nan=t0) - t0) // width, 0, nb - 1).astype(np.int64)
