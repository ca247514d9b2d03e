"""Batch-level events folded into per-batch columns while a run is scanned (:mod:`lotus.query.scan`).

:func:`lotus.query.batches.batches_from_events` joins, per batch key (rank, loader, epoch, batch_id),
one event of each kind of :data:`~lotus.query.batches._PARTS` (the first of duplicates, with a
warning) and the sums of :data:`~lotus.query.batches._SUMS` (collate and put times; collate's largest
``arg`` as the sample count). :class:`BatchParts` accumulates exactly those values while the chunks go
by, in dense arrays per (rank, loader, epoch) indexed by batch id (on disk, :mod:`lotus.query.spill`:
the pages a chunk touched are dropped after it), a sentinel (the dtype's minimum)
where a kind was not seen; a column exists only once an event fills it. Timestamps are int64; the
other columns (durations, flags, ids) start as int32 and become int64 when a value needs it.
:meth:`BatchParts.finish` turns them into a :class:`lotus.query.batchtable.BatchTable`, one column at
a time (the groups' arrays of a column freed once it is made: the peak is the groups plus one column).

``BatchParts(where, columns)`` keeps only ``columns`` (:data:`SUMMARY_COLUMNS`: what ``lotus analyze
stats|wait|verdict`` read); a kind none of whose columns is kept sets a bit of :data:`SEEN` instead, so
that the same keys are batches and the same duplicates are counted. Such a table is ``partial``.

Dense arrays need dense batch ids (torch numbers the batches of an epoch 0, 1, 2...). Ids that would
make the arrays much larger than the events seen (a huge or hashed id) raise :class:`SparseBatchIds`:
the scan then starts over without folding (the batch-level events kept as rows, as before).

The events folded and not kept as rows (:data:`DROPPED`) leave the events DataFrame; their time extent
per epoch is kept (:attr:`BatchParts.extent`) so that the run's span (``lotus viz --window``) is the
same as with every event.
"""

from __future__ import annotations

import logging

import numpy as np

from lotus.query import spill
from lotus.query.batches import _PARTS, _SUMS
from lotus.trace import schema as S

_log = logging.getLogger("lotus.trace")
I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)
# batch-level kinds that only the batches table reads: folded and not kept as event rows (exhausted,
# failed fetches and the GPU events stay rows too: outcomes and GPU telemetry read them)
DROPPED = ("fetch", "dispatch", "arrive", "pin", "wait", "consumed", "step", "collate", "put")
TIMES = ("prep_start_ns", "dispatch_ns", "arrive_ns", "pin_start_ns", "wait_start_ns", "consumed_ns")  # int64
COLUMNS = (*(c for m in _PARTS.values() for c in m.values()), *_SUMS.values(), "_collate_n")
# what lotus analyze stats|wait|verdict read of the table (lotus.analysis.compact, BatchTable.only_batches)
SUMMARY_COLUMNS = frozenset(("worker_id", "dispatch_worker", "prep_start_ns", "prep_dur_ns", "_fetch_flags",
                             "_exhausted_worker", "dispatch_ns", "arrive_ns", "_arrive_flags", "wait_start_ns",
                             "wait_dur_ns", "_wait_flags", "consumed_ns"))
SEEN = "_seen"  # uint8, a bit per kind whose columns are not kept: the kind was seen for that batch
SLACK_SLOTS = 1 << 20  # dense slots always allowed ...
SLOTS_PER_EVENT = 8  # ... plus this many per folded event (a dense trace has ~0.1-0.5 slots per event)


class SparseBatchIds(Exception):
    """Batch ids too sparse for dense arrays (see the module doc)."""


def sentinel(dtype) -> int:
    return int(np.iinfo(dtype).min)


def _widen_spilled(a: np.ndarray) -> np.ndarray:
    """:func:`widen` of a group's column, on disk, a slice at a time."""
    out = spill.array(len(a), np.int64)
    step = 1 << 19
    for i in range(0, len(a), step):
        out[i: i + step] = widen(a[i: i + step])
        spill.drop(out, a)
    return out


def widen(a: np.ndarray) -> np.ndarray:
    """An int32 column as int64, its sentinel kept a sentinel."""
    if a.dtype == np.int64:
        return a
    out = a.astype(np.int64)
    out[a == I32.min] = I64.min
    return out


class BatchParts:
    """Per-batch columns of the batch-level events of a run, filled chunk by chunk (module doc)."""

    def __init__(self, where: str, columns=None):
        self.where = where
        self.columns = None if columns is None else frozenset(columns)  # the columns kept (None: all)
        kinds = [*_PARTS, *_SUMS]  # kinds none of whose columns is kept: only a bit of SEEN says they were seen
        self.seen_bit = {} if columns is None else {
            k: 1 << i for i, k in enumerate(k for k in kinds
                                            if not (set(_PARTS.get(k, {}).values()) | {_SUMS.get(k)}) & self.columns)}
        self.groups: dict[tuple[int, int, int], dict] = {}  # (rank, loader, epoch) -> {"cap": n, column: array}
        self.kind_of_code = {S.EVENTS_BY_NAME[n].id: n for n in (*_PARTS, *_SUMS)}
        self.first_col = {k: next(iter(m.values())) for k, m in _PARTS.items()}  # a kind is seen there
        self.first_col.update(_SUMS)
        self.duplicates: dict[str, int] = {}
        self.slots = 0  # dense slots allocated, over all groups
        self.events = 0  # events folded
        self.extent: dict[int, list[int]] = {}  # epoch -> [first start, last end] of the rows not kept
        self.fetches = np.zeros(3, np.int64)  # fetches (batch id >= 0): ok, ok and detail, detail (any)

    # -- filling ---------------------------------------------------------------------------------------
    def codes(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Boolean lookups by event code: (folded kinds, kinds whose rows are dropped)."""
        fold = np.zeros(size, bool)
        fold[list(self.kind_of_code)] = True
        drop = np.zeros(size, bool)
        drop[[S.EVENTS_BY_NAME[n].id for n in DROPPED]] = True
        return fold, drop

    def _group(self, key, need: int, check: bool = True) -> dict:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = {"cap": 0}
        if need > g["cap"]:
            cap = max(need, int(g["cap"] * 1.25), 256)
            if check and self.slots + cap - g["cap"] > SLACK_SLOTS + SLOTS_PER_EVENT * self.events:
                raise SparseBatchIds(f"batch id {need - 1} of rank {key[0]}, loader {key[1]}, epoch {key[2]}")
            self.slots += cap - g["cap"]
            for name, a in list(g.items()):
                if name != "cap":  # one column at a time, on disk (lotus.query.spill)
                    g[name] = spill.copy_of(a, n=cap, fill=sentinel(a.dtype))
            g["cap"] = cap
        return g

    @staticmethod
    def _col(g, name) -> np.ndarray:
        if name not in g:
            dtype = np.int64 if name in TIMES else np.uint8 if name == SEEN else np.int32
            g[name] = spill.array(g["cap"], dtype, sentinel(dtype))
        return g[name]

    def _put(self, g, name, idx, values) -> None:
        """``g[name][idx] = values`` (int64 values), the column widened to int64 if they need it."""
        a = self._col(g, name)
        if a.dtype == np.int32 and len(values):
            v = np.asarray(values)
            if int(v.min()) <= I32.min or int(v.max()) > I32.max:
                a = g[name] = _widen_spilled(a)
        a[idx] = values

    def add(self, rank: int, code, bid, loader, epoch, fields: dict) -> None:
        """Folded rows of one chunk (batch id >= 0, kinds of :meth:`codes`), in file order: ``fields``
        maps a source column (worker_id, pid, start_ns, dur_ns, arg, sample) to its values (an array over the
        rows, or a scalar)."""
        self.events += len(code)
        touched: list[dict] = []
        pair = loader.astype(np.int64) << 32 | (epoch.astype(np.int64) & 0xFFFFFFFF)
        for c in np.unique(code).tolist():
            kind = self.kind_of_code[c]
            m = code == c
            if kind == "fetch":
                self._count_fetches(fields["arg"][m])
            for pr in np.unique(pair[m]).tolist():
                sel = np.flatnonzero(m & (pair == pr))
                key = (rank, int(loader[sel[0]]), int(epoch[sel[0]]))
                ids = bid[sel].astype(np.int64)
                g = self._group(key, int(ids.max()) + 1)
                if not any(g is x for x in touched):
                    touched.append(g)
                val = {f: (v[sel] if isinstance(v, np.ndarray) else v) for f, v in fields.items()}
                if kind in self.seen_bit:  # nothing kept but that it was seen (and its duplicates counted)
                    self._seen(g, kind, ids)
                elif kind in _PARTS:  # the first event of a key (file order), as batches_from_events keeps
                    first = self._col(g, self.first_col[kind])
                    u, at = np.unique(ids, return_index=True)
                    new = first[u] == sentinel(first.dtype)
                    dup = len(ids) - int(new.sum())
                    if dup:
                        self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
                    tgt, src = u[new], at[new]
                    for f, name in _PARTS[kind].items():
                        if self.columns is not None and name not in self.columns:
                            continue
                        v = val[f]
                        self._put(g, name, tgt, v[src] if isinstance(v, np.ndarray) else np.full(len(tgt), v))
                else:  # summed per key (int64, exact); collate's largest arg is the sample count
                    u, inv = np.unique(ids, return_inverse=True)
                    total = np.zeros(len(u), np.int64)
                    np.add.at(total, inv, val["dur_ns"])
                    before = widen(self._col(g, _SUMS[kind])[u])
                    self._put(g, _SUMS[kind], u, np.where(before == I64.min, 0, before) + total)
                    if kind == "collate":
                        top = widen(self._col(g, "_collate_n")[u])
                        np.maximum.at(top, inv, np.broadcast_to(val["arg"], ids.shape))
                        self._put(g, "_collate_n", u, top)

        for g in touched:  # what this chunk touched of the groups' columns goes back to the page cache
            spill.drop(*(a for name, a in g.items() if name != "cap"))

    def _seen(self, g, kind, ids) -> None:
        seen, bit = self._col(g, SEEN), self.seen_bit[kind]
        u = np.unique(ids)
        if kind in _PARTS:
            dup = len(ids) - int(((seen[u] & bit) == 0).sum())
            if dup:
                self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
        seen[u] |= bit

    def _count_fetches(self, arg) -> None:
        """What :func:`lotus.query.outcomes.detail_share` reads of the fetches, which are no rows."""
        ok = (arg < 0) | ((arg & S.FETCH_ERROR) == 0)
        flagged = (arg > 0) & ((arg & S.FETCH_DETAIL) != 0)
        self.fetches += [int(ok.sum()), int((ok & flagged).sum()), int(flagged.sum())]

    def dropped(self, epoch, start, dur) -> None:
        """Time extent of folded rows not kept as events, per epoch (see the module doc)."""
        end = start + np.maximum(dur, 0)
        for e in np.unique(epoch).tolist():
            m = epoch == e
            lo, hi = int(start[m].min()), int(end[m].max())
            x = self.extent.setdefault(int(e), [lo, hi])
            x[0], x[1] = min(x[0], lo), max(x[1], hi)

    # -- merging ---------------------------------------------------------------------------------------
    def absorb(self, other: BatchParts) -> None:
        """Fold in ``other``, the parts of files read after this one's (:mod:`lotus.query.scanmerge`), as one
        :class:`BatchParts` reading all those files in that order would have made them: per key and kind,
        the columns of the first that saw it (a later one's count as duplicates), sums added, collate's
        sample count the larger; group arrays on disk (:mod:`lotus.query.spill`)."""
        self.events += other.events
        self.slots += other.slots
        self.fetches = self.fetches + other.fetches
        for kind, n in other.duplicates.items():
            self.duplicates[kind] = self.duplicates.get(kind, 0) + n
        for e, (lo, hi) in other.extent.items():
            x = self.extent.setdefault(e, [lo, hi])
            x[0], x[1] = min(x[0], lo), max(x[1], hi)
        for key, theirs in other.groups.items():
            mine = self.groups.get(key)
            if mine is None:  # large arrays to disk (the parts come from other processes, in memory)
                self.groups[key] = spill.copies_of(theirs)
                continue
            self._group(key, theirs["cap"], check=False)
            self._absorb_group(mine, theirs)
            spill.drop(*(a for n, a in mine.items() if n != "cap"))

    def _absorb_group(self, g: dict, theirs: dict) -> None:
        n = theirs["cap"]
        for kind, cols in _PARTS.items():
            fc = self.first_col[kind]
            if kind in self.seen_bit or fc not in theirs:
                continue
            got = theirs[fc] != sentinel(theirs[fc].dtype)
            had = self._col(g, fc)[:n] != sentinel(g[fc].dtype)
            dup = int((got & had).sum())
            if dup:
                self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
            take = np.flatnonzero(got & ~had)
            for name in cols.values():
                if name in theirs:
                    self._put(g, name, take, widen(theirs[name][take]))
        for name in _SUMS.values():
            if name in theirs:
                v = widen(theirs[name])
                at = np.flatnonzero(v != I64.min)
                before = widen(self._col(g, name)[at])
                self._put(g, name, at, np.where(before == I64.min, 0, before) + v[at])
        if "_collate_n" in theirs:
            v = widen(theirs["_collate_n"])
            at = np.flatnonzero(v != I64.min)
            self._put(g, "_collate_n", at, np.maximum(widen(self._col(g, "_collate_n")[at]), v[at]))
        if SEEN in theirs:
            seen, t = self._col(g, SEEN), theirs[SEEN]
            for kind, bit in self.seen_bit.items():
                if kind in _PARTS:
                    dup = int((((seen[:n] & bit) != 0) & ((t & bit) != 0)).sum())
                    if dup:
                        self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
            seen[:n] |= t

    # -- the table -------------------------------------------------------------------------------------
    def finish(self, attrs: dict):
        """The :class:`~lotus.query.batchtable.BatchTable` of the parts (only the keys that are batches);
        the group arrays are released column by column. ``attrs``: the events' attrs."""
        from lotus.query.batchtable import BatchTable

        for kind in _PARTS:  # one warning per kind, in the order batches_from_events gives them
            if self.duplicates.get(kind):
                _log.warning("%s: %d duplicate '%s' events for the same batch key ignored", self.where,
                             self.duplicates[kind], kind)
        from lotus.query.tablebuild import build

        keys = sorted(self.groups)
        counts, bid, raw = build(self.groups, keys, COLUMNS)
        self.groups = {}
        table = BatchTable(np.array(keys, np.int64).reshape(-1, 3), counts, bid, raw, attrs)
        table.partial = self.columns is not None
        return table.only_batches()
