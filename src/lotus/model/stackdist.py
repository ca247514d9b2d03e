"""Exact LRU stack distances and static-cache thresholds, streamed a block of accesses at a time.

:func:`lotus.model.cache.cache_hit_rates` feeds the simulated accesses here in blocks (:class:`Streams`)
and keeps only per-epoch histograms, so no per-access array of the whole sequence is ever held.

**LRU** (Mattson's inclusion property): access ``t`` of item ``x`` hits in an LRU cache of ``C`` bytes iff
its *stack distance* ``D_t`` -- the size of ``x`` plus the sizes of the distinct items accessed since the
previous access ``p`` of ``x`` -- is ``<= C``. The distinct items of ``(p, t)`` are those whose last access
before ``t`` lies in ``(p, t)``. For a block of accesses ``[c, c + m)`` holding ``t``:

``D_t = w_t + live(p, c) + w[max(p + 1, c), t) - W_t``

* ``live(p, c)``: the sizes of the distinct items whose last access before ``c`` lies in ``(p, c)`` (0 when
  ``p >= c``): a binary search in the sorted last-access positions before the block (``L``, one per item
  seen; with sizes, their prefix sums);
* ``w[a, t)``: the sizes of the block's accesses in ``[a, t)`` (with unit sizes ``t - a``);
* ``W_t``: the sizes of the block's accesses ``s < t`` whose previous access ``p_s > p`` (an item counted
  above that came back before ``t``): for each access, the weighted count of earlier ones with a larger
  previous position, an offline dominance count done bit by bit over the access's index in the block
  (:func:`earlier_greater`: a wavelet-style stable partition, ``log2(m)`` vectorised passes).

After the block, ``L`` drops the previous positions it replaced and appends the block's last accesses of
each item (all larger than ``L``'s: no sort).

**static**: items are admitted in order of first access while the admitted total fits; an access's
threshold is the total size of the items first accessed up to its item's first access (``inf`` for the
first access itself).

Memory: per dataset item, its last access position (int32 while positions fit), ``L`` (int32; with sizes
also int64 sizes and prefix sums) and the static threshold (int32 with unit sizes, else int64): ~12 bytes
an item, ~21 while ``L`` is rebuilt after a block; plus ~60 bytes an access of one block
(:func:`block_size`: ~1/32 of the items, 2^16..2^19 accesses), nothing per access of the whole sequence.
E.g. 13.8M items: ~290 MiB at the peak (tracemalloc), ~7.4 bytes an access at 3 epochs. Time: O(n log m) for ``n``
accesses in blocks of ``m``, plus O(items) a block to rebuild ``L``.
"""

from __future__ import annotations

import numpy as np

BLOCK = 1 << 19  # accesses a block at most (~60 bytes of temporaries each: ~30 MiB)
MIN_BLOCK = 1 << 16


def block_size(n_items: int) -> int:
    """Accesses a block for ``n_items`` items: ~1/32 of them (rebuilding ``L`` costs O(items) a block)."""
    return int(min(BLOCK, max(MIN_BLOCK, 1 << int(n_items // 32).bit_length())))


def earlier_greater(v: np.ndarray, w: np.ndarray | None = None, *, order: np.ndarray | None = None) -> np.ndarray:
    """For every ``t``: the sum of ``w[s]`` (1 if None) over ``s < t`` with ``v[s] > v[t]``; ``v`` distinct.

    Items are taken in order of decreasing ``v``; then, bit by bit from the top of the index ``t``, an item
    whose bit is 1 adds the earlier items of its group (same higher bits) whose bit is 0, and each group is
    split stably into its 0s and 1s. Because indices are 0..m-1, a group starts at ``(t >> (k+1)) << (k+1)``
    and the 0s before it number half of that: no per-group bookkeeping. After the last bit, position ``t``
    holds item ``t``. int32 (int64 with weights). ``order``: ``argsort(v)`` when known.
    """
    m = len(v)
    it = np.int32 if m < 2**31 else np.int64
    acc = np.zeros(m, it if w is None else np.int64)
    if m < 2:
        return acc
    order = np.argsort(v, kind="stable") if order is None else order
    e = order[::-1].astype(it)  # the index of each item, by decreasing v
    wt = None if w is None else np.asarray(w, np.int64)[e]
    idx = np.arange(m, dtype=it)
    for k in range(int(m - 1).bit_length() - 1, -1, -1):
        ones = ((e >> k) & 1).astype(bool)
        half = e >> (k + 1)
        half <<= k  # half the start of the item's group in the current order
        zero = (~ones).view(np.int8)
        zb = np.cumsum(zero, dtype=it)
        zb -= zero
        zb -= half  # 0s before the item in its group
        if wt is None:
            acc += np.where(ones, zb, 0).astype(it, copy=False)
        else:
            zw = np.where(ones, 0, wt)
            cz = np.cumsum(zw)
            cz -= zw
            del zw
            acc += np.where(ones, cz - cz[half << 1], 0)
            del cz
        half <<= 1
        half += zb
        newpos = np.where(ones, idx - zb + (1 << k), half)  # 0s first, then 1s, each in their order
        del half, zb, ones
        for arr in (e, acc) if wt is None else (e, acc, wt):
            tmp = arr.copy()
            arr[newpos] = tmp
        del newpos, tmp
    return acc


class Streams:
    """LRU stack distances and static thresholds of a sequence of accesses fed in order, block by block.

    ``n_items``: item ids are in ``[0, n_items)``; ``n_accesses``: at most this many accesses in all (for
    the position dtype); ``sizes``: per item (int), or None for unit sizes.
    """

    def __init__(self, n_items: int, n_accesses: int, sizes=None, *, lru: bool = True, static: bool = True):
        self.pt = np.int32 if n_accesses < 2**31 - 1 else np.int64
        self.sizes = None if sizes is None else np.asarray(sizes, np.int64)
        self.last = np.full(n_items, -1, self.pt)  # last access position of each item (-1: none yet)
        self.pos = 0
        self.lru, self.static = lru, static
        self.L = np.zeros(0, self.pt)  # sorted last-access positions (one per item seen)
        self.Lw = None if self.sizes is None else np.zeros(0, np.int64)  # their items' sizes
        need_t = self.pt if self.sizes is None else np.int64
        self.need = np.zeros(n_items, need_t) if static else None  # static threshold of each item seen
        self.admitted = 0

    def feed(self, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The next block's accesses ``x`` (item ids): (LRU stack distances, static thresholds), float64 with
        ``inf`` for a first access; None for a policy not asked for."""
        x = np.asarray(x)
        m, c = len(x), self.pos
        pos = np.arange(c, c + m, dtype=self.pt)
        p = self.last[x]  # previous access before the block (-1: none)
        self.last[x] = pos  # with repeated items any of theirs wins: fixed below
        is_last = None
        if not np.array_equal(self.last[x], pos):  # an item comes twice in the block
            o = np.argsort(x, kind="stable")
            same = x[o][1:] == x[o][:-1]
            p[o[1:][same]] = pos[o[:-1][same]]
            is_last = np.ones(m, bool)
            is_last[o[:-1][same]] = False
            del o, same
            self.last[x[is_last]] = pos[is_last]
        w = None if self.sizes is None else self.sizes[x]
        d = self._lru(p, pos, c, w, is_last) if self.lru else None
        s = self._static(x, p, w) if self.static else None
        self.pos += m
        return d, s

    def _lru(self, p, pos, c, w, is_last):
        m = len(p)
        has = np.flatnonzero(p >= 0)
        ph = p[has]
        order = np.argsort(ph, kind="stable")
        ps = ph[order]  # the previous positions, sorted
        k = int(np.searchsorted(ps, c))  # ps[:k] lie before the block: each is in L
        at = np.searchsorted(self.L, ps[:k])  # their place in L (sorted keys: a cache-friendly search)
        del ps
        d = earlier_greater(ph, None if w is None else w[has], order=order).astype(np.int64)
        np.negative(d, out=d)  # -W_t
        lo = np.maximum(ph + 1, c) - c  # the block's accesses from here on count in w[lo, t)
        del ph
        live = np.zeros(len(has), np.int64)  # live(p, c): 0 where p is in the block
        if w is None:
            live[order[:k]] = len(self.L) - 1 - at
            d += live
            d += has - lo + 1  # w[lo, t) + w_t
        else:
            cl = np.concatenate(([0], np.cumsum(self.Lw)))
            live[order[:k]] = cl[-1] - cl[at + 1]
            del cl
            d += live
            cw = np.concatenate(([0], np.cumsum(w)))
            d += cw[has] - cw[lo] + w[has]
            del cw
        del live, lo, order
        out = np.full(m, np.inf)
        out[has] = d
        del d, has
        # L: drop the previous positions that the block replaced, append its last accesses (all larger)
        keep = np.ones(len(self.L), bool)
        keep[at] = False
        new = pos if is_last is None else pos[is_last]
        self.L = np.concatenate((self.L[keep], new))
        if w is not None:
            self.Lw = np.concatenate((self.Lw[keep], w if is_last is None else w[is_last]))
        return out

    def _static(self, x, p, w):
        first = p < 0
        fresh = x[first]  # items seen for the first time, in order of first access
        wf = np.ones(len(fresh), np.int64) if w is None else w[first]
        cum = np.cumsum(wf)
        cum += self.admitted
        self.need[fresh] = cum
        if len(cum):
            self.admitted = int(cum[-1])
        out = self.need[x].astype(np.float64)
        out[first] = np.inf
        return out


def distances(seq, sizes=None, *, lru: bool = True) -> np.ndarray:
    """Stack distances (``lru``) or static thresholds of a whole sequence (``inf``: first access)."""
    seq = np.asarray(seq, np.int64)
    out = np.empty(len(seq))
    if len(seq) == 0:
        return out
    if seq.min() < 0:
        raise ValueError("item ids must be >= 0")
    st = Streams(int(seq.max()) + 1, len(seq), sizes, lru=lru, static=not lru)
    block = block_size(int(seq.max()) + 1)
    for a in range(0, len(seq), block):
        d, s = st.feed(seq[a:a + block])
        out[a:a + len(d if lru else s)] = d if lru else s
    return out


__all__ = ["BLOCK", "MIN_BLOCK", "Streams", "block_size", "distances", "earlier_greater"]
