"""Batch-level events folded into per-batch columns while a run is scanned (:mod:`lotus.trace.scan`).

:func:`lotus.trace.batches.batches_from_events` joins, per batch key (rank, loader, epoch, batch_id),
one event of each kind of :data:`~lotus.trace.batches._PARTS` (the first of duplicates, with a
warning) and the sums of :data:`~lotus.trace.batches._SUMS` (collate and put times; collate's largest
``arg`` as the sample count). :class:`BatchParts` accumulates exactly those values while the chunks go
by, in dense int64 arrays per (rank, loader, epoch) indexed by batch id (``SENTINEL`` where a kind was
not seen): 8 bytes per batch and column present, instead of one ~43-byte event row per batch and
event kind. :meth:`BatchParts.joined` is the frame ``batches_from_events`` would have joined.

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
from lotus.trace.batches import _PARTS, _SUMS, KEY

_log = logging.getLogger("lotus.trace")
SENTINEL = np.iinfo(np.int64).min  # "not seen" in the per-batch arrays
# batch-level kinds that only the batches table reads: folded and not kept as event rows (fetch,
# exhausted and the GPU events stay rows too: outcomes, detail share, GPU telemetry read them)
DROPPED = ("dispatch", "arrive", "pin", "wait", "consumed", "step", "collate", "put")
SLACK_SLOTS = 1 << 20  # dense slots always allowed ...
SLOTS_PER_EVENT = 8  # ... plus this many per folded event (a dense trace has ~0.1-0.5 slots per event)


class SparseBatchIds(Exception):
    """Batch ids too sparse for dense arrays (see the module doc)."""


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
            cap = max(need, int(g["cap"] * 1.5), 256)
            if self.slots + cap - g["cap"] > SLACK_SLOTS + SLOTS_PER_EVENT * self.events:
                raise SparseBatchIds(f"batch id {need - 1} of rank {key[0]}, loader {key[1]}, epoch {key[2]}")
            self.slots += cap - g["cap"]
            for name, a in list(g.items()):
                if name != "cap":  # one column at a time: the growth costs one column more, not the group
                    b = np.full(cap, SENTINEL, np.int64)
                    b[: g["cap"]] = a
                    g[name] = b
            g["cap"] = cap
        return g

    @staticmethod
    def _col(g, name) -> np.ndarray:
        if name not in g:
            g[name] = np.full(g["cap"], SENTINEL, np.int64)
        return g[name]

    def add(self, rank: int, code, bid, loader, epoch, fields: dict) -> None:
        """Folded rows of one chunk (batch id >= 0, kinds of :meth:`codes`), in file order: ``fields``
        maps a source column (worker_id, pid, start_ns, dur_ns, arg) to its values (an array over the
        rows, or a scalar)."""
        self.events += len(code)
        pair = loader.astype(np.int64) << 32 | (epoch.astype(np.int64) & 0xFFFFFFFF)
        for c in np.unique(code).tolist():
            kind = self.kind_of_code[c]
            m = code == c
            for pr in np.unique(pair[m]).tolist():
                sel = np.flatnonzero(m & (pair == pr))
                key = (rank, int(loader[sel[0]]), int(epoch[sel[0]]))
                ids = bid[sel].astype(np.int64)
                g = self._group(key, int(ids.max()) + 1)
                val = {f: (v[sel] if isinstance(v, np.ndarray) else v) for f, v in fields.items()}
                if kind in _PARTS:  # the first event of a key (file order), as batches_from_events keeps
                    u, first = np.unique(ids, return_index=True)
                    new = self._col(g, self.first_col[kind])[u] == SENTINEL
                    dup = len(ids) - int(new.sum())
                    if dup:
                        self.duplicates[kind] = self.duplicates.get(kind, 0) + dup
                    tgt, src = u[new], first[new]
                    for f, name in _PARTS[kind].items():
                        v = val[f]
                        self._col(g, name)[tgt] = v[src] if isinstance(v, np.ndarray) else v
                else:  # summed per key; collate's largest arg is the sample count
                    total = self._col(g, _SUMS[kind])
                    total[ids[total[ids] == SENTINEL]] = 0
                    np.add.at(total, ids, val["dur_ns"])
                    if kind == "collate":
                        np.maximum.at(self._col(g, "_collate_n"), ids, np.broadcast_to(val["arg"], ids.shape))

    def dropped(self, epoch, start, dur) -> None:
        """Time extent of folded rows not kept as events, per epoch (see the module doc)."""
        end = start + np.maximum(dur, 0)
        for e in np.unique(epoch).tolist():
            m = epoch == e
            lo, hi = int(start[m].min()), int(end[m].max())
            x = self.extent.setdefault(int(e), [lo, hi])
            x[0], x[1] = min(x[0], lo), max(x[1], hi)

    # -- the join --------------------------------------------------------------------------------------
    def warn_duplicates(self) -> None:
        for kind in _PARTS:  # one warning per kind, in the order batches_from_events gives them
            if self.duplicates.get(kind):
                _log.warning("%s: %d duplicate '%s' events for the same batch key ignored", self.where,
                             self.duplicates[kind], kind)

    def joined(self):
        """The outer join of the parts on the batch key, sorted by key (as ``batches_from_events`` builds
        it; nullable Int64 columns); the arrays are released column by column. None without any
        batch-level event."""
        import pandas as pd

        self.warn_duplicates()
        keys = sorted(self.groups)
        if not keys:
            return None
        rows = []
        for k in keys:
            g = self.groups[k]
            seen = np.zeros(g["cap"], bool)
            for name, a in g.items():
                if name not in ("cap", "_collate_n"):
                    seen |= a != SENTINEL
            rows.append(np.flatnonzero(seen))
        n = [len(r) for r in rows]
        cols = {c: np.repeat(np.array([k[i] for k in keys], np.int64), n) for i, c in enumerate(KEY[:3])}
        cols["batch_id"] = np.concatenate(rows)
        names = [c for m in _PARTS.values() for c in m.values()] + [*_SUMS.values(), "_collate_n"]
        for name in names:
            if not any(name in self.groups[k] for k in keys):
                continue
            vals = np.full(len(cols["batch_id"]), SENTINEL, np.int64)
            pos = 0
            for k, r in zip(keys, rows, strict=True):
                a = self.groups[k].pop(name, None)
                if a is not None:
                    vals[pos: pos + len(r)] = a[r]
                pos += len(r)
            cols[name] = pd.arrays.IntegerArray(vals, vals == SENTINEL)
        self.groups = {}
        return pd.DataFrame(cols, copy=False)
