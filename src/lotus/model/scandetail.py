"""The model's :class:`~lotus.model.detail.Detail` of a scanned run, read from its trace files in chunks.

A run read by the out-of-core engine (:mod:`lotus.query.scan`) keeps no per-sample events. The model's
observation (:func:`lotus.model.observation.observe`) needs, of the main loader's events matched to its
batches: per-batch sums and counts of ``sample``, ``load`` and ``transform`` durations, every op's
durations, the dispatch durations and which loads were first reads of their sample. One more pass over
the files (:func:`lotus.trace.chunks.record_chunks`: the chunks, in the order, of :func:`lotus.trace.load_events`)
computes them with what :func:`lotus.model.detail.detail_of_events` gives on the whole DataFrame:

* events are matched to batches exactly as there (the same packed keys; :class:`BatchRows`: a direct
  lookup per (rank, epoch) where the batch ids are dense, ``np.searchsorted`` otherwise), the chunks
  handled :data:`SLICE_ROWS` records at a time;
* per-batch sums: float64 ``bincount`` of each chunk added up; durations are integers, so every partial
  sum is exact (below 2**53 ns, 104 days, a batch) and the result is the whole array's ``bincount``;
* op durations: a :class:`lotus.analysis.exactstats.Floats` stream per op, in file order (the
  DataFrame's), spilled to a temporary file past 512k values; the fit's distributions of them are
  numpy's, bit for bit (:mod:`lotus.model.streams`); dispatch durations: an array (one per batch);
* first reads: per sample id, the earliest load (start time; ties: the earlier event in file order, as
  the stable sort of :func:`lotus.model.measures.rereads`), kept in dense arrays indexed by sample id
  (16 bytes an id, 20 once a load took 2.1 s or more: bounded by the dataset, not the trace) or, for ids
  too sparse for that (past :data:`DENSE_SLOTS` and 4 per load seen), in sorted arrays merged a chunk at
  a time. The means of first reads and re-reads are integer sums divided by counts: numpy's ``mean`` of
  those durations while their total stays below 2**53 ns (104 days of load time), as every partial sum is then exact.

Memory: O(batches) (sums, int32 counts, the key lookup -- no permutation where the keys come in order, as
a scanned run's do -- and the dispatches: ~50 bytes a batch; the model's own per-batch arrays are of that
order) plus O(dataset) for the first reads (16-20 bytes an id, allocated once at the loader's dataset length
where it is known), plus one chunk of records and a slice's temporaries; nothing per event (the op streams
spill to disk past 512k values each).
"""

from __future__ import annotations

import logging

import numpy as np

from lotus.analysis.exactstats import Floats
from lotus.analysis.stats import LEAD_OPS, TAIL_OPS
from lotus.model.detail import NOT_OPS, Detail, batch_keys
from lotus.trace import schema as S

_log = logging.getLogger("lotus.model")
DENSE_SLOTS = 1 << 24  # sample ids below this are kept in dense arrays (more if the loads seen are many)
SLICE_ROWS = 1 << 17  # records of a chunk handled at once
_NONE = np.iinfo(np.int64).max
_I32_MAX = int(np.iinfo(np.int32).max)
_SUMMED = {S.EV_SAMPLE: "sample", S.EV_LOAD: "load", S.EV_TRANSFORM: "transform"}


class FirstReads:
    """Per sample id, the earliest load seen (start, batch row, duration); sums of every load (module doc)."""

    def __init__(self, slots: int | None = None, rows: int = 0) -> None:
        self.ids: np.ndarray | None = None  # sorted sample ids (sparse mode); None: dense, indexed by id
        self.slots = slots  # the dataset's length if known: the dense arrays' size, allocated once
        self.start = np.zeros(0, np.int64)
        self.row = np.zeros(0, np.int32 if rows < 2**31 else np.int64)
        self.dur = np.zeros(0, np.int32)  # int32 while every duration fits (2.1 s), then int64
        self.count = 0  # loads of a known sample (id >= 0)
        self.total = 0  # their summed duration (ns)

    def add(self, sample: np.ndarray, start: np.ndarray, row: np.ndarray, dur: np.ndarray) -> None:
        """Loads of one chunk, in file order (known sample ids only)."""
        self.count += len(sample)
        self.total += int(dur.sum())
        o = np.lexsort((start, sample))  # stable: of equal starts, the earlier event first
        s = sample[o]
        o = o[np.r_[True, s[1:] != s[:-1]]]
        sample, start, row, dur = sample[o], start[o], row[o], dur[o]
        if self.dur.dtype == np.int32 and len(dur) and not -_I32_MAX <= int(dur.min()) <= int(dur.max()) <= _I32_MAX:
            self.dur = self.dur.astype(np.int64)
        if self.ids is None:
            top = int(sample[-1]) + 1
            if top > len(self.start):
                if top > max(DENSE_SLOTS, 4 * self.count):
                    self._to_sparse()
                    return self._merge(sample, start, row, dur)
                n = max(top, int(len(self.start) * 1.25))
                if self.slots and top <= self.slots <= max(DENSE_SLOTS, 4 * self.count):
                    n = self.slots
                for name, fill in (("start", _NONE), ("row", 0), ("dur", 0)):
                    a = np.full(n, fill, getattr(self, name).dtype)
                    a[: len(getattr(self, name))] = getattr(self, name)
                    setattr(self, name, a)
            better = start < self.start[sample]  # an equal start came later in file order: not earlier
            s = sample[better]
            self.start[s], self.row[s], self.dur[s] = start[better], row[better], dur[better]
            return None
        return self._merge(sample, start, row, dur)

    def _to_sparse(self) -> None:
        seen = np.flatnonzero(self.start != _NONE)
        _log.info("sample ids too sparse for dense arrays: first reads kept as sorted ids")
        self.ids, self.start, self.row, self.dur = seen, self.start[seen], self.row[seen], self.dur[seen]

    def _merge(self, sample, start, row, dur) -> None:
        ids = np.concatenate([self.ids, sample])
        st = np.concatenate([self.start, start])
        tie = np.r_[np.zeros(len(self.ids), np.int8), np.ones(len(sample), np.int8)]  # kept ones first
        o = np.lexsort((tie, st, ids))
        k = ids[o]
        o = o[np.r_[True, k[1:] != k[:-1]]]
        self.ids, self.start = ids[o], st[o]
        self.row = np.concatenate([self.row, row])[o]
        self.dur = np.concatenate([self.dur, dur])[o]

    def result(self, nb: int) -> tuple[np.ndarray, tuple[float, float, int, int] | None]:
        """(first reads per batch row, (mean first read, mean re-read (ns), their counts) or None)."""
        # the slots of ids never loaded hold row 0 and duration 0: counted in row 0 then taken out, summed as 0
        # (no index array of the loaded ids: the dataset's size, 8 bytes an id, at the peak of the fit)
        # (the start times and durations are reduced and dropped before the per-batch counts are made)
        unseen = 0 if self.ids is not None else int((self.start == _NONE).sum())
        n_first = len(self.start) - unseen
        first_sum = int(self.dur.sum())
        self.start, self.dur, self.ids = np.zeros(0, np.int64), np.zeros(0, np.int32), None
        first = np.bincount(self.row, minlength=nb)
        self.row = np.zeros(0, self.row.dtype)
        if unseen:
            first[0] -= unseen
        first = first.astype(np.float64)
        n_re = self.count - n_first
        if self.count == 0 or n_re == 0:
            return first, None
        return first, (float(np.float64(first_sum) / n_first), float(np.float64(self.total - first_sum) / n_re),
                       n_first, n_re)


class BatchRows:
    """The row of a batch key (:func:`batch_keys`) among ``keys``, or -1: ``np.searchsorted`` on the sorted
    keys, as :func:`lotus.model.detail.detail_of_events` matches them; where the batch ids of each (rank,
    epoch) are dense (at most :data:`DENSE_SLOTS` more slots than keys), a direct lookup in one array of
    rows per (rank, epoch) instead (the same matches: a packed key is its high 32 bits, rank and epoch,
    and its low 32 bits, the batch id)."""

    def __init__(self, keys: np.ndarray):
        self.nb = len(keys)
        # keys in order (a scanned run's batches): no permutation to keep (order None: the identity)
        ordered = self.nb < 2 or bool((keys[1:] > keys[:-1]).all())
        self.order = None if ordered else np.argsort(keys)
        self.sorted = keys if ordered else keys[self.order]
        hi = self.sorted >> 32
        cuts = np.r_[0, np.flatnonzero(np.diff(hi)) + 1, self.nb]
        lo = self.sorted & 0xFFFFFFFF  # ascending within a group
        first, last = lo[cuts[:-1]], lo[cuts[1:] - 1]
        sizes = last - first + 1
        self.groups: dict[int, tuple[int, int, int]] | None = None  # high bits -> (offset, first id, slots)
        if int(sizes.sum()) <= self.nb + DENSE_SLOTS:
            offsets = np.r_[0, np.cumsum(sizes)[:-1]]
            self.slots = np.full(int(sizes.sum()), -1, np.int32 if self.nb < 2**31 else np.int64)
            for g, (a, b) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True)):
                self.slots[offsets[g] + lo[a:b] - first[g]] = np.arange(a, b) if self.order is None else self.order[a:b]
            self.groups = {int(h): (int(o), int(f), int(n)) for h, o, f, n in
                           zip(hi[cuts[:-1]].tolist(), offsets.tolist(), first.tolist(), sizes.tolist(), strict=True)}

    def __call__(self, ek: np.ndarray) -> np.ndarray:
        if self.groups is None:
            pos = np.searchsorted(self.sorted, ek).clip(0, self.nb - 1)
            return np.where(self.sorted[pos] == ek, pos if self.order is None else self.order[pos], -1)
        row = np.full(len(ek), -1, np.int64)
        if not len(ek):
            return row
        hi, lo = ek >> 32, ek & 0xFFFFFFFF
        one = hi[0] == hi[-1] and bool((hi == hi[0]).all())
        for h in ([int(hi[0])] if one else np.unique(hi).tolist()):
            g = self.groups.get(h)
            if g is None:
                continue
            at = None if one else np.flatnonzero(hi == h)
            idx = (lo if at is None else lo[at]) - g[1]
            inr = np.flatnonzero((idx >= 0) & (idx < g[2]))
            row[inr if at is None else at[inr]] = self.slots[g[0] + idx[inr]]
        return row


class _Pass:
    """What one pass over the files accumulates (module doc)."""

    def __init__(self, keys: np.ndarray, loader: int, dataset_len: int | None = None):
        self.loader, self.nb = loader, len(keys)
        self.rows = BatchRows(keys)
        self.first: dict[int, int] = {}  # code -> first event of the loader (global index in file order)
        self.sums: dict[int, np.ndarray] = {}
        self.counts: dict[int, np.ndarray] = {}
        self.streams: dict[int, Floats] = {}
        self.dispatch: list[np.ndarray] = []
        self.reads = FirstReads(dataset_len, self.nb)
        self.want = np.zeros(0, bool)

    def refresh(self, cats: list[str]) -> None:
        want = np.array([c == S.OP_CAT for c in cats], bool)
        want[[S.EV_SAMPLE, S.EV_LOAD, S.EV_TRANSFORM, S.EV_DISPATCH, S.EV_COLLATE]] = True
        self.want = want

    def chunk(self, arr, code, fs, base: int) -> None:
        mine = arr["loader"].astype(np.int64) + fs.loader_offset == self.loader
        every = bool(mine.all())  # as usual, one loader: no gathers of the loader's events
        sel = None if every else np.flatnonzero(mine)
        if sel is not None and not len(sel):
            return
        c = code if every else code[sel]
        present = np.flatnonzero(np.bincount(c)).tolist()
        for k in present:
            if k not in self.first:
                self.first[k] = base + int(np.argmax(c == k) if every else sel[np.argmax(c == k)])
        want = self.want[c]
        w = np.flatnonzero(want) if every else sel[want]
        if not len(w):
            return
        row = self.rows(batch_keys(fs.consts["rank"], arr["epoch"][w], arr["batch_id"][w]))
        ok = row >= 0
        if not ok.all():
            ok = np.flatnonzero(ok)
            w, row = w[ok], row[ok]
        cw = code[w]
        dur = arr["dur_ns"][w]
        for k in (k for k in present if self.want[k]):
            m = np.flatnonzero(cw == k)
            if not len(m):
                continue
            r, d = row[m], dur[m]
            if k in _SUMMED:
                self._sum(k, r, d)
            if k == S.EV_DISPATCH:
                self.dispatch.append(d.astype(np.float64))
            elif k not in (S.EV_SAMPLE, S.EV_TRANSFORM):  # load, collate and the ops
                self.streams.setdefault(k, Floats()).add(d.astype(np.float64))
            if k == S.EV_LOAD:
                at = w[m]
                sample = arr["sample"][at]
                known = sample >= 0
                if not known.all():
                    known = np.flatnonzero(known)
                    if not len(known):
                        continue
                    at, sample, r, d = at[known], sample[known], r[known], d[known]
                self.reads.add(sample, arr["start_ns"][at] + fs.shift, r, d)

    def _sum(self, k: int, r: np.ndarray, d: np.ndarray) -> None:
        if k not in self.sums:  # counts: int32 (events a batch), none of transforms (only their sums are read)
            self.sums[k] = np.zeros(self.nb)
            if k != S.EV_TRANSFORM:
                self.counts[k] = np.zeros(self.nb, np.int32)
        lo = int(r.min())
        part = np.bincount(r - lo, weights=d)
        self.sums[k][lo: lo + len(part)] += part
        if k in self.counts:
            self.counts[k][lo: lo + len(part)] += np.bincount(r - lo, minlength=len(part)).astype(np.int32)

    def detail(self, names: list[str], cats: list[str]) -> Detail:
        from lotus.trace.events import unique_labels

        labels = unique_labels(names)

        def summed(k):
            if k not in self.first:  # no event of that kind: None, as the DataFrame path
                return None, None
            return self.sums.get(k, np.zeros(self.nb)), self.counts.get(k, np.zeros(self.nb, np.int32))

        if S.EV_LOAD in self.first:  # first: the first reads' arrays (the dataset's size) dropped before the rest
            first_reads, reread = self.reads.result(self.nb)
        else:
            first_reads, reread = np.zeros(self.nb), None
        self.reads = FirstReads()
        s_sum, s_cnt = summed(S.EV_SAMPLE)
        l_sum, l_cnt = summed(S.EV_LOAD)
        t_sum, _ = summed(S.EV_TRANSFORM)
        found = {labels[k]: (i, k) for k, i in self.first.items()}
        ops = sorted((i, n) for n, (i, k) in found.items() if cats[k] == S.OP_CAT)
        order = [n for n in LEAD_OPS if n in found] + [n for _, n in ops] + [n for n in TAIL_OPS if n in found]
        op_ns = {n: self.streams[found[n][1]] if found[n][1] in self.streams else Floats()
                 for n in order if n not in NOT_OPS}
        dispatch = np.concatenate(self.dispatch) if self.dispatch else np.zeros(0)
        self.dispatch = []
        return Detail(s_sum, s_cnt, l_sum, l_cnt, t_sum, op_ns, dispatch, first_reads, reread)


def detail_of_scan(engine, keys: np.ndarray, loader: int, dataset_len: int | None = None) -> Detail:
    """:class:`Detail` of the events of loader ``loader`` of the scanned run of ``engine`` (an
    :class:`lotus.query.opengine.OpEngine`) for the batches of ``keys`` (:func:`batch_keys`);
    ``dataset_len`` (the loader's, if known): the size of the first reads' dense arrays, allocated once."""
    from lotus.trace.chunks import record_chunks
    from lotus.trace.events import Accumulator

    acc = Accumulator()
    p = _Pass(keys, loader, dataset_len)
    base = 0
    spans: dict = {}
    for path in engine.paths:
        for arr, code, fs in record_chunks(path, engine.offsets, engine.loader_offsets.get(path, 0), acc.code,
                                     spans=spans):
            if len(p.want) != len(acc.names):
                p.refresh(acc.cats)
            for i in range(0, len(arr), SLICE_ROWS):  # in slices: their temporaries stay small
                p.chunk(arr[i: i + SLICE_ROWS], code[i: i + SLICE_ROWS], fs, base + i)
            base += len(arr)
    _log.debug("%s: per-sample detail of %d events read in chunks", getattr(engine, "paths", ["run"])[0], base)
    return p.detail(list(acc.names), list(acc.cats))


__all__ = ["DENSE_SLOTS", "BatchRows", "FirstReads", "detail_of_scan"]
