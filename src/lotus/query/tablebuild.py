"""The columns of a :class:`lotus.query.batchtable.BatchTable` from the per-group arrays of
:class:`lotus.query.batchparts.BatchParts` (its ``finish``), a block of slots at a time.

Everything is made on disk (:mod:`lotus.query.spill`) and read back :data:`BLOCK` slots at a time,
the pages dropped after each block, so that making the table costs the same memory for any number of
batches: per group, which slots are keys (a bool a slot, spilled), then the batch ids, then each
column, the groups' arrays of a column released as it is made. The values and their order are those
of the previous in-memory construction (a column is int64 where any group's is, else int32).
"""

from __future__ import annotations

import numpy as np

from lotus.query import spill

BLOCK = 1 << 19  # slots handled at once


def _sentinel(dtype) -> int:
    return int(np.iinfo(dtype).min)


def _blocks(n: int):
    for i in range(0, n, BLOCK):
        yield i, min(n, i + BLOCK)


def build(groups: dict, keys: list, columns) -> tuple[np.ndarray, np.ndarray, dict]:
    """(rows per group, batch ids, column name -> array) of the groups ``keys`` (sorted), for the
    ``columns`` in their order; the groups' arrays are popped as they are used."""
    seen = []  # per group: which slots are keys
    counts = np.zeros(len(keys), np.int64)
    top = 0
    for j, k in enumerate(keys):
        g = groups[k]
        s = spill.array(g["cap"], bool)
        for lo, hi in _blocks(g["cap"]):
            m = np.zeros(hi - lo, bool)
            for name, a in g.items():
                if name not in ("cap", "_collate_n"):
                    m |= a[lo:hi] != _sentinel(a.dtype)
                    spill.drop(a)
            s[lo:hi] = m
            n = int(m.sum())
            counts[j] += n
            if n:
                top = max(top, lo + int(np.flatnonzero(m)[-1]))
            spill.drop(s)
        seen.append(s)
        g.pop("_seen", None)
    bid = spill.array(int(counts.sum()), np.int32 if top <= np.iinfo(np.int32).max else np.int64)
    pos = 0
    for s in seen:
        for lo, hi in _blocks(len(s)):
            at = np.flatnonzero(s[lo:hi]) + lo
            bid[pos: pos + len(at)] = at
            pos += len(at)
            spill.drop(s, bid)
    raw = {}
    for name in columns:
        have = [groups[k][name].dtype for k in keys if name in groups[k]]
        if not have:
            continue
        dtype = np.int64 if np.int64 in have else np.int32
        out = spill.array(len(bid), dtype)
        pos = 0
        for k, s, n in zip(keys, seen, counts.tolist(), strict=True):
            a = groups[k].pop(name, None)
            if a is None:
                for lo, hi in _blocks(n):
                    out[pos + lo: pos + hi] = _sentinel(dtype)
                    spill.drop(out)
                pos += n
                continue
            for lo, hi in _blocks(len(s)):
                v = a[lo:hi][s[lo:hi]].astype(dtype)
                if dtype != a.dtype:  # int32 -> int64: the sentinel stays a sentinel
                    v[v == _sentinel(a.dtype)] = _sentinel(dtype)
                out[pos: pos + len(v)] = v
                pos += len(v)
                spill.drop(a, s, out)
            del a
        raw[name] = out
    return counts, bid, raw
