"""The access order the cache what-if simulates, read flat: only the epochs the simulation uses.

:func:`lotus.model.cache.cache_hit_rates` simulates ``n_epochs`` epochs (``lotus whatif --epochs``, 3 by
default): the first ``n_epochs`` recorded epochs of :func:`lotus.model.cache.access_epochs`, completed and
extended by :func:`lotus.model.cache.extend_epochs`. Of the other recorded epochs it needs only three
facts: the largest dataset index read (the dataset's length is at least one more), how many epochs there
are, and, for the sampler's kind (:func:`lotus.model.cache.sampler_kind`), whether each repeats the first
epoch's order. :func:`access_order` reads a scanned run's trace files once, in chunks
(:func:`lotus.trace.chunks.record_chunks`, in the order of :func:`lotus.trace.load_events`), and keeps:

* per loader, the rows of the ``n_epochs`` smallest epochs seen so far (a smaller epoch arriving later
  drops the largest kept one), a segment (one chunk's rows of one epoch) at a time: its dataset indices
  (int32 when they fit) sorted by batch, start time, then arrival, and per batch of the segment its id,
  row count and first and last start time (:class:`_Segment`): about 4-5 bytes a row (a batch's ~32 rows
  share 24 bytes), so O(``n_epochs`` x samples an epoch);
* per loader, counters: rows, the largest index, rows per epoch.

The selection is that of ``access_epochs``, exactly: ``sample`` events with a known index, else ``load``
events (a ``sample`` event seen drops what was kept of ``load`` ones); the loader with the most of them
(ties: the smallest id); per epoch ordered by batch, rank, start time, then file order (a stable sort of
the kept rows, which arrive in file order). An epoch is put in that order from its segments' batches
(:func:`_ordered`): the batches' rows in order of (batch id, rank, first start, segment), which is the
order of the rows themselves wherever the batches of one (batch id, rank) in several segments do not
overlap in time (a batch cut by a chunk's end: the later piece starts after the earlier one ends); where
they do (a batch's rows spread over files), that epoch is read again with every row's start time and
sorted as a whole (:func:`_ordered_rows`): the same order in every case. Memory is bounded by the
simulated epochs, not the run's length; time is one pass over the files. One case reads again: when the
kind decides the result (an epoch
is completed or generated), the first epoch's order is not mostly increasing and the kept epochs all
repeat it, then the other epochs are read (as many as fit :data:`RECHECK_ROWS` rows a pass, stopping at
the first that differs) to tell a repeated order from a random one.

A run read into memory (events DataFrame) goes through ``access_epochs`` itself (:func:`order_of_epochs`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from lotus.trace import schema as S

_log = logging.getLogger("lotus.model")
RECHECK_ROWS = 1 << 23  # rows of further epochs held at once (~5 B each) when the kind must be checked
_I32 = np.iinfo(np.int32)


@dataclass
class AccessOrder:
    """What the cache simulation reads of a run's recorded access order.

    ``epochs``: the first ``min(n_epochs, recorded)`` recorded epochs' dataset indices in consumption order
    (the values :func:`~lotus.model.cache.access_epochs` gives; int32 where read flat and every index fits,
    else int64); ``recorded``: recorded epochs in
    all; ``seen``: 1 + the largest index of every recorded epoch (0: none); ``kind``: the sampler's kind of
    every recorded epoch (:func:`~lotus.model.cache.sampler_kind`), or None where it cannot change the
    result (no epoch is completed or generated)."""

    epochs: list[np.ndarray]
    recorded: int
    seen: int
    kind: str | None


def order_of_epochs(epochs: list[np.ndarray], n_epochs: int) -> AccessOrder:
    """The :class:`AccessOrder` of every recorded epoch held in memory (``access_epochs``' result)."""
    from lotus.model.cache import sampler_kind

    seen = max((int(e.max()) + 1 for e in epochs if len(e)), default=0)
    return AccessOrder(list(epochs[:max(n_epochs, 1)]), len(epochs), seen, sampler_kind(epochs) if epochs else None)


def access_order(run, n_epochs: int, dataset_len: int | None = None, *, loader: int | None = None) -> AccessOrder:
    """The access order of ``run`` (a :class:`lotus.model.observation.RunTrace`) the cache what-if of
    ``n_epochs`` epochs needs (module doc); ``dataset_len`` as given to the simulation."""
    from lotus.analysis.stats import op_engine
    from lotus.model.cache import access_epochs

    n_epochs = max(int(n_epochs), 1)
    engine = op_engine(run.events)
    if engine is None:
        return order_of_epochs(access_epochs(run.events, loader=loader), n_epochs)
    c = _Collect(n_epochs, loader=loader)
    c.read(engine)
    chosen = c.chosen()
    if chosen is None:
        return AccessOrder([], 0, 0, None)
    t = c.tallies.get(chosen)
    if t is None:  # the asked loader read nothing: access_epochs gives one empty epoch
        return AccessOrder([np.zeros(0, np.int64)], 1, 0, "sequential")
    order = sorted(t.epochs)
    kept = sorted(t.kept)
    assert kept == order[:n_epochs], (kept, order[:n_epochs])
    epochs = []
    for e in kept:
        got = _ordered(t.kept.pop(e))
        if got is None:  # batches of one (batch id, rank) overlap in time across segments: every row's start
            _log.info("cache what-if: reading epoch %d again with its rows' start times to order it", e)
            got = _reread_epoch(engine, c.sample, chosen, e)
        epochs.append(got)
    n = max(int(dataset_len or 0), t.seen)
    kind = _kind(epochs, len(order), n, n_epochs)
    if kind == "?":
        kind = _recheck(engine, c.sample, chosen, epochs[0], order[n_epochs:], t.epochs)
    return AccessOrder(epochs, len(order), t.seen, kind)


def _increasing(e: np.ndarray) -> bool:
    return len(e) < 2 or float(np.mean(np.diff(e) > 0)) > 0.9


def _kind(epochs: list[np.ndarray], recorded: int, n: int, n_epochs: int) -> str | None:
    """``sampler_kind`` of every recorded epoch from the kept ones; None where unused, "?" to read on."""
    from lotus.model.cache import sampler_kind

    if recorded == len(epochs):
        return sampler_kind(epochs)
    if _increasing(epochs[0]):
        return "sequential"
    e0 = epochs[0]
    if any(len(e) != len(e0) or not np.array_equal(e, e0) for e in epochs[1:]):
        return "random"
    covered = np.zeros(n, bool)
    covered[e0] = True
    if bool(covered.all()):  # every kept epoch (the same order) reads the whole dataset: kind unused
        return None
    return "?"


def _recheck(engine, sample: bool, loader: int, e0: np.ndarray, rest: list[int], rows: dict) -> str:
    """``sequential`` if every epoch in ``rest`` repeats ``e0``'s order, else ``random`` (reads again)."""
    i = 0
    while i < len(rest):
        group, held = [], 0
        while i < len(rest) and (not group or held + rows[rest[i]] <= RECHECK_ROWS):
            group.append(rest[i])
            held += rows[rest[i]]
            i += 1
        if any(rows[e] != len(e0) for e in group):
            return "random"
        _log.info("cache what-if: reading epochs %s again to tell the sampler's kind", group)
        c = _Collect(len(group), loader=loader, only=set(group), sample=sample)
        c.read(engine)
        t = c.tallies[loader]
        for e in group:
            got = _ordered(t.kept.pop(e))
            if not np.array_equal(_reread_epoch(engine, sample, loader, e) if got is None else got, e0):
                return "random"
    return "sequential"


def _reread_epoch(engine, sample: bool, loader: int, epoch: int) -> np.ndarray:
    """Epoch ``epoch`` of ``loader`` read again keeping every row's start time, ordered as a whole."""
    c = _Collect(1, loader=loader, only={epoch}, sample=sample, rows=True)
    c.read(engine)
    return _ordered_rows(c.tallies[loader].kept.pop(epoch))


class _Segment:
    """One chunk's rows of one epoch (a file's rank): the dataset indices sorted by (batch id, start time,
    arrival), and per batch among them (ascending ids) its id, rows, first and last start time."""

    __slots__ = ("bid", "count", "first", "last", "rank", "sample")

    def __init__(self, sample: np.ndarray, batch: np.ndarray, start: np.ndarray, rank: int) -> None:
        if len(batch) > 1 and not bool(((batch[1:] > batch[:-1])
                                         | ((batch[1:] == batch[:-1]) & (start[1:] >= start[:-1]))).all()):
            o = np.lexsort((start, batch))  # stable: of equal (batch, start), the earlier row first
            sample, batch, start = sample[o], batch[o], start[o]
            del o
        cuts = np.flatnonzero(batch[1:] != batch[:-1]) + 1
        heads = np.r_[0, cuts]
        ends = np.r_[cuts, len(batch)]
        self.sample, self.rank = sample, rank
        self.bid = batch[heads]
        self.count = (ends - heads).astype(np.int32)
        self.first, self.last = start[heads], start[ends - 1]


def _ordered(segments: list) -> np.ndarray | None:
    """An epoch's dataset indices by batch, rank, start time, then arrival (stable) from its kept
    :class:`_Segment` s (emptied once joined); None where two segments' rows of one (batch id, rank) overlap
    in time (then only every row's start time orders them: :func:`_reread_epoch`)."""
    if not segments:
        return np.zeros(0, np.int64)
    k = len(segments)
    sizes = np.array([len(g.bid) for g in segments], np.int64)
    bid = np.concatenate([g.bid.astype(np.int64, copy=False) for g in segments])
    rank = np.repeat(np.array([g.rank for g in segments], np.int64), sizes)
    seg = np.repeat(np.arange(k, dtype=np.int64), sizes)
    first = np.concatenate([g.first for g in segments])
    last = np.concatenate([g.last for g in segments])
    count = np.concatenate([g.count for g in segments]).astype(np.int64)
    off = np.cumsum(count) - count  # of each batch's rows among the segments' rows, joined in arrival order
    o = np.lexsort((seg, first, rank, bid))
    bid, rank, seg, first, last, count, off = bid[o], rank[o], seg[o], first[o], last[o], count[o], off[o]
    del o
    same = (bid[1:] == bid[:-1]) & (rank[1:] == rank[:-1])
    if same.any():  # a later piece of a (batch, rank) must start after the earlier ends (equal: later segment)
        after = (first[1:] > last[:-1]) | ((first[1:] == last[:-1]) & (seg[1:] > seg[:-1]))
        if not bool(after[same].all()):
            return None
    del bid, rank, seg, first, last, same
    sample = np.concatenate([g.sample for g in segments])
    segments.clear()
    out = np.empty(len(sample), sample.dtype)
    pos = 0
    step = 1 << 16  # batches copied at once: the index's temporaries stay small
    for a in range(0, len(count), step):
        c, f = count[a: a + step], off[a: a + step]
        n = int(c.sum())
        idx = np.repeat(f - (np.cumsum(c) - c), c) + np.arange(n)
        out[pos: pos + n] = sample[idx]
        pos += n
    return out  # int32 where the indices fit (the simulation reads it as is), else int64


def _ordered_rows(cols: tuple[list, list, list, list]) -> np.ndarray:
    """An epoch's dataset indices by batch, rank, start time, then arrival (stable). ``cols``: the kept
    segments' samples, batch ids, start times and (rows, rank), each list emptied once joined."""
    if not cols[0]:
        return np.zeros(0, np.int64)

    def joined(parts: list) -> np.ndarray:
        out = np.concatenate(parts)
        parts.clear()  # one column's segments freed before the next is joined
        return out

    sample, batch, start = joined(cols[0]), joined(cols[1]), joined(cols[2])
    ranks = cols[3]
    dt = np.int32 if all(_I32.min <= r <= _I32.max for _, r in ranks) else np.int64
    rank = np.repeat(np.array([r for _, r in ranks], dt), [k for k, _ in ranks])
    ranks.clear()
    o = np.lexsort((start, rank, batch))
    del start, rank, batch
    return sample[o]  # int32 where the indices fit (the simulation reads it as is), else int64


def _narrow(a: np.ndarray) -> np.ndarray:
    """int32 when every value fits, else int64 (a copy either way: the chunk's buffer is not held)."""
    if len(a) and _I32.min <= int(a.min()) and int(a.max()) <= _I32.max:
        return a.astype(np.int32)
    return a.astype(np.int64)


class _Tally:
    """One loader's counters and kept epochs (epoch -> its :class:`_Segment` s; of a :class:`_Collect` with
    ``rows``: the segments' columns sample, batch_id, start_ns, and (rows, rank) of each segment)."""

    __slots__ = ("epochs", "kept", "rows", "seen")

    def __init__(self) -> None:
        self.rows, self.seen = 0, 0
        self.epochs: dict[int, int] = {}
        self.kept: dict[int, tuple[list, list, list, list]] = {}


class _Collect:
    """One pass over a scanned run's files: the tallies of the selected events (module doc)."""

    def __init__(self, n_keep: int, *, loader: int | None = None, only: set[int] | None = None,
                 sample: bool = False, rows: bool = False) -> None:
        self.n_keep, self.loader, self.only = n_keep, loader, only
        self.rows = rows  # keep every row's columns (start time included), not segments (_reread_epoch)
        self.sample = sample  # True once a sample event with an index is seen: load events no longer count
        self.fixed = only is not None  # a re-read: the kind of event is known
        self.tallies: dict[int, _Tally] = {}

    def read(self, engine) -> None:
        from lotus.trace.chunks import record_chunks
        from lotus.trace.events import Accumulator

        acc = Accumulator()
        spans: dict = {}
        for path in engine.paths:
            for arr, code, fs in record_chunks(path, engine.offsets, engine.loader_offsets.get(path, 0), acc.code,
                                               spans=spans):
                self._chunk(arr, code, fs)

    def _chunk(self, arr, code, fs) -> None:
        smp = arr["sample"]
        valid = smp >= 0
        is_sample = (code == S.EV_SAMPLE) & valid
        if self.sample or (not self.fixed and is_sample.any()):
            if not self.sample:
                self.sample = True
                self.tallies.clear()  # load events no longer count (access_epochs prefers sample events)
            m = np.flatnonzero(is_sample)
        else:
            m = np.flatnonzero((code == S.EV_LOAD) & valid)
        if not len(m):
            return
        lo = arr["loader"][m].astype(np.int64) + fs.loader_offset
        ep = arr["epoch"][m].astype(np.int64)
        if lo[0] == lo.min() == lo.max() and ep[0] == ep.min() == ep.max():
            self._group(int(lo[0]), int(ep[0]), m, arr, fs)
            return
        key = (lo - lo.min()) * (1 << 34) + (ep - ep.min())
        o = np.argsort(key, kind="stable")
        ks = key[o]
        cuts = np.r_[0, np.flatnonzero(np.diff(ks)) + 1, len(ks)]
        for a, b in pairwise(cuts.tolist()):
            i = o[a]
            self._group(int(lo[i]), int(ep[i]), m[o[a:b]], arr, fs)

    def _group(self, loader: int, epoch: int, m: np.ndarray, arr, fs) -> None:
        """Rows ``m`` of ``arr`` (one loader and epoch, in file order)."""
        t = self.tallies.get(loader)
        if t is None:
            t = self.tallies[loader] = _Tally()
        smp = arr["sample"][m]
        t.rows += len(m)
        t.seen = max(t.seen, int(smp.max()) + 1)
        t.epochs[epoch] = t.epochs.get(epoch, 0) + len(m)
        if self.loader is not None and loader != self.loader:
            return
        if epoch not in t.kept:
            if self.only is not None:
                if epoch not in self.only:
                    return
            elif len(t.kept) >= self.n_keep:
                top = max(t.kept)
                if epoch > top:
                    return
                del t.kept[top]  # a smaller epoch came: the largest kept one is not simulated
            t.kept[epoch] = ([], [], [], []) if self.rows else []
        if self.rows:
            cols = t.kept[epoch]
            cols[0].append(_narrow(smp))
            cols[1].append(_narrow(arr["batch_id"][m]))
            cols[2].append(arr["start_ns"][m] + fs.shift)
            cols[3].append((len(m), int(fs.consts["rank"])))
            return
        t.kept[epoch].append(_Segment(_narrow(smp), _narrow(arr["batch_id"][m]), arr["start_ns"][m] + fs.shift,
                                      int(fs.consts["rank"])))

    def chosen(self) -> int | None:
        """The loader simulated: the one asked, else the one with the most rows (ties: the smallest id)."""
        if not self.tallies:
            return None
        if self.loader is not None:
            return self.loader
        return min(self.tallies, key=lambda lo: (-self.tallies[lo].rows, lo))


__all__ = ["RECHECK_ROWS", "AccessOrder", "access_order", "order_of_epochs"]
