"""Batch-level events folded into per-batch columns while a run is scanned (:mod:`lotus.trace.scan`).

:func:`lotus.trace.batches.batches_from_events` joins, per batch key (rank, loader, epoch, batch_id),
one event of each kind of :data:`~lotus.trace.batches._PARTS` (the first of duplicates, with a
warning) and the sums of :data:`~lotus.trace.batches._SUMS` (collate and put times; collate's largest
``arg`` as the sample count). :class:`BatchParts` accumulates exactly those values while the chunks go
by, in dense arrays per (rank, loader, epoch) indexed by batch id, a sentinel (the dtype's minimum)
where a kind was not seen; a column exists only once an event fills it. Timestamps are int64; the
other columns (durations, flags, ids) start as int32 and become int64 when a value needs it.
:meth:`BatchParts.finish` turns them into a :class:`lotus.trace.batchtable.BatchTable`.

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

from lotus.trace import schema as S
from lotus.trace.batches import _PARTS, _SUMS

_log = logging.getLogger("lotus.trace")
I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)
# batch-level kinds that only the batches table reads: folded and not kept as event rows (exhausted,
# failed fetches and the GPU events stay rows too: outcomes and GPU telemetry read them)
DROPPED = ("fetch", "dispatch", "arrive", "pin", "wait", "consumed", "step", "collate", "put")
TIMES = ("prep_start_ns", "dispatch_ns", "arrive_ns", "pin_start_ns", "wait_start_ns", "consumed_ns")  # int64
COLUMNS = (*(c for m in _PARTS.values() for c in m.values()), *_SUMS.values(), "_collate_n")
SLACK_SLOTS = 1 << 20  # dense slots always allowed ...
SLOTS_PER_EVENT = 8  # ... plus this many per folded event (a dense trace has ~0.1-0.5 slots per event)


class SparseBatchIds(Exception):
    """Batch ids too sparse for dense arrays (see the module doc)."""


def sentinel(dtype) -> int:
    return int(np.iinfo(dtype).min)


def widen(a: np.ndarray) -> np.ndarray:
    """An int32 column as int64, its sentinel kept a sentinel."""
    if a.dtype == np.int64:
        return a
    out = a.astype(np.int64)
    out[a == I32.min] = I64.min
    return out


class BatchParts:
    """Per-batch columns of the batch-level events of a run, filled chunk by chunk (module doc)."""

    def __init__(self, where: str):
        self.where = where
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

    def _group(self, key, need: int) -> dict:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = {"cap": 0}
        if need > g["cap"]:
            cap = max(need, int(g["cap"] * 1.25), 256)
            if self.slots + cap - g["cap"] > SLACK_SLOTS + SLOTS_PER_EVENT * self.events:
                raise SparseBatchIds(f"batch id {need - 1} of rank {key[0]}, loader {key[1]}, epoch {key[2]}")
            self.slots += cap - g["cap"]
            for name, a in list(g.items()):
                if name != "cap":  # one column at a time: the growth costs one column more, not the group
                    b = np.full(cap, sentinel(a.dtype), a.dtype)
                    b[: g["cap"]] = a
                    g[name] = b
            g["cap"] = cap
        return g

    @staticmethod
    def _col(g, name) -> np.ndarray:
        if name not in g:
            dtype = np.int64 if name in TIMES else np.int32
            g[name] = np.full(g["cap"], sentinel(dtype), dtype)
        return g[name]

    def _put(self, g, name, idx, values) -> None:
        """``g[name][idx] = values`` (int64 values), the column widened to int64 if they need it."""
        a = self._col(g, name)
        if a.dtype == np.int32 and len(values):
            v = np.asarray(values)
            if int(v.min()) <= I32.min or int(v.max()) > I32.max:
                a = g[name] = widen(a)
        a[idx] = values

    def add(self, rank: int, code, bid, loader, epoch, fields: dict) -> None:
        """Folded rows of one chunk (batch id >= 0, kinds of :meth:`codes`), in file order: ``fields``
        maps a source column (worker_id, pid, start_ns, dur_ns, arg) to its values (an array over the
        rows, or a scalar)."""
        self.events += len(code)
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
                val = {f: (v[sel] if isinstance(v, np.ndarray) else v) for f, v in fields.items()}
                if kind in _PARTS:  # the first event of a key (file order), as batches_from_events keeps
                    first = self._col(g, self.first_col[kind])
                    u, at = np.unique(ids, return_index=True)
                    new = first[u] == sentinel(first.dtype)
                    dup = len(ids) - int(new.sum())
                    if dup:
                        self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
                    tgt, src = u[new], at[new]
                    for f, name in _PARTS[kind].items():
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

    def _count_fetches(self, arg) -> None:
        """What :func:`lotus.trace.batches.detail_share` reads of the fetches, which are no rows."""
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

    # -- the table -------------------------------------------------------------------------------------
    def finish(self, attrs: dict):
        """The :class:`~lotus.trace.batchtable.BatchTable` of the parts (only the keys that are batches);
        the group arrays are released column by column. ``attrs``: the events' attrs."""
        from lotus.trace.batchtable import BatchTable

        for kind in _PARTS:  # one warning per kind, in the order batches_from_events gives them
            if self.duplicates.get(kind):
                _log.warning("%s: %d duplicate '%s' events for the same batch key ignored", self.where,
                             self.duplicates[kind], kind)
        keys = sorted(self.groups)
        rows = []
        for k in keys:
            g = self.groups[k]
            seen = np.zeros(g["cap"], bool)
            for name, a in g.items():
                if name not in ("cap", "_collate_n"):
                    seen |= a != sentinel(a.dtype)
            rows.append(np.flatnonzero(seen))
        counts = np.array([len(r) for r in rows], np.int64)
        top = max((int(r[-1]) for r in rows if len(r)), default=0)
        bid = np.concatenate(rows).astype(np.int32 if top <= I32.max else np.int64) if rows else np.zeros(0, np.int32)
        raw = {}
        for name in COLUMNS:
            have = [self.groups[k][name].dtype for k in keys if name in self.groups[k]]
            if not have:
                continue
            dtype = np.int64 if np.int64 in have else np.int32
            out = np.full(len(bid), sentinel(dtype), dtype)
            pos = 0
            for k, r in zip(keys, rows, strict=True):
                a = self.groups[k].pop(name, None)
                if a is not None:
                    out[pos: pos + len(r)] = (widen(a) if dtype == np.int64 else a)[r]
                pos += len(r)
            raw[name] = out
        self.groups = {}
        table = BatchTable(np.array(keys, np.int64).reshape(-1, 3), counts, bid, raw, attrs)
        return table.only_batches()
