"""Cache what-if from the recorded sample order: an LRU page cache and a static (MinIO/CoorDL) cache.

Pure numpy, every cache size at once:

* **LRU** (Mattson's inclusion property): access ``t`` of item ``x`` hits in an LRU cache of capacity
  ``C`` bytes iff its *stack distance* ``D_t`` -- the size of ``x`` plus the sizes of the distinct
  items accessed since the previous access of ``x`` -- is ``<= C`` (with eviction "least recent until
  the new item fits", the cache always holds the longest prefix of the recency stack that fits).
  ``D_t = w_t + sum(w of accesses in (p, t)) - nested(p, t)``, where ``p`` is the previous access and
  ``nested`` sums the weights of the accesses ``i`` in ``(p, t)`` whose item comes back before ``t``
  (counted once too often): the intervals ``(i, next_i)`` nested in ``(p, t)``. The nested sums of all
  intervals are one offline dominance count, done bit by bit over the interval ends (a wavelet-style
  stable partition, O(n log n) vectorised passes).
* **static**: items are admitted in order of first access while the admitted total fits (the first that
  does not fit closes the cache), never evicted; a later access hits iff its item was admitted.

Both start empty (a cold page cache at the first epoch). Sizes: ``sizes_bytes`` per dataset index, or
uniform. The order: per epoch, the dataset indices of the main loader's ``sample`` (else ``load``)
events, by batch then position, ranks interleaved batch by batch (one page cache per host).
``lotus whatif`` reads only the simulated epochs' orders (:mod:`lotus.model.accessorder`).

Memory: O(simulated accesses), ``n_epochs`` x the dataset's samples (not the run's events): ~72-75 bytes
an access at the peak (the nesting count), e.g. ~290 MiB for 3 epochs of 1.38M samples.
"""

from __future__ import annotations

import numpy as np

POLICIES = ("lru", "static")
DEFAULT_FRACTIONS = tuple(np.round(np.linspace(0.0, 1.0, 21), 4))


def access_epochs(events, *, loader: int | None = None) -> list[np.ndarray]:
    """Per recorded epoch, the dataset indices read, in consumption order (see the module doc)."""
    cat = events["name"].array
    labels = {str(c): i for i, c in enumerate(cat.categories)}
    codes = np.asarray(cat.codes)
    sample = events["sample"].to_numpy()
    mask = None
    for name in ("sample", "load"):
        if name in labels:
            mask = (codes == labels[name]) & (sample >= 0)
            if mask.any():
                break
    if mask is None or not mask.any():
        return []
    lo = events["loader"].to_numpy()[mask]
    if loader is None:
        vals, counts = np.unique(lo, return_counts=True)
        loader = int(vals[np.argmax(counts)])
    m = np.flatnonzero(mask)[lo == loader]
    ep = events["epoch"].to_numpy()[m]
    # by epoch, batch, rank, then time (np.lexsort: last key first)
    o = np.lexsort((events["start_ns"].to_numpy()[m], events["rank"].to_numpy()[m],
                    events["batch_id"].to_numpy()[m], ep))
    seq, ep = sample[m][o], ep[o]
    cuts = np.flatnonzero(np.diff(ep)) + 1
    return [np.asarray(a, np.int64) for a in np.split(seq, cuts)]


def sampler_kind(epochs: list[np.ndarray]) -> str:
    """``sequential`` (every epoch the same order / mostly increasing) or ``random``."""
    if len(epochs) >= 2 and all(len(e) == len(epochs[0]) and np.array_equal(e, epochs[0]) for e in epochs[1:]):
        return "sequential"
    e = epochs[0] if epochs else np.zeros(0)
    if len(e) < 2:
        return "sequential"
    return "sequential" if float(np.mean(np.diff(e) > 0)) > 0.9 else "random"


def extend_epochs(epochs: list[np.ndarray], n_epochs: int, dataset_len: int, *, kind: str | None = None,
                  seed: int = 0) -> list[np.ndarray]:
    """``n_epochs`` full epochs: the recorded ones (completed when the run stopped early), then generated.

    A partial epoch is completed with the indices it did not read: in increasing order (sequential) or
    in a random order (random). Further epochs: the first epoch's order again (sequential), or random
    permutations from ``numpy.random.default_rng(seed)`` (random).
    """
    kind = kind or sampler_kind(epochs)
    rng = np.random.default_rng(seed)
    out = []
    for e in epochs[:n_epochs]:
        seen = np.zeros(dataset_len, bool)
        seen[e[(e >= 0) & (e < dataset_len)]] = True
        rest = np.flatnonzero(~seen)
        if rest.size:
            rest = rest if kind == "sequential" else rng.permutation(rest)
        out.append(np.concatenate([e, rest]).astype(np.int64))
    while len(out) < n_epochs:
        if kind == "sequential":
            out.append(out[0].copy() if out else np.arange(dataset_len, dtype=np.int64))
        else:
            out.append(rng.permutation(dataset_len).astype(np.int64))
    return out


def _nested_sums(start: np.ndarray, end: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """For every interval i: sum of ``w`` (1 if None) over intervals j with start_j > start_i, end_j < end_i.

    Starts and ends are distinct integers. Ends are replaced by their ranks 0..n-1 and the items taken in
    order of decreasing start; then, bit by bit from the top of the rank, an item whose bit is 1 adds
    the earlier items of its group (same higher bits) whose bit is 0, and each group is split stably
    into its 0s and 1s. Because ranks are 0..n-1, a group's start is ``(rank >> (k+1)) << (k+1)`` and
    the 0s before it number half of that: no per-group bookkeeping, ~15 vectorised passes per bit.
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, np.int64)
    by_end = _order_distinct(end)
    it = np.int32 if n < 2**30 else np.int64
    erank = np.empty(n, it)
    erank[by_end] = np.arange(n, dtype=it)
    order = _order_distinct(start)[::-1]
    e = erank[order]
    del erank
    idx = np.arange(n, dtype=it)
    wt = None if w is None else np.asarray(w, np.int64)[order]
    del order
    acc = np.zeros(n, np.int64)
    for k in range(max(int(n - 1).bit_length(), 1) - 1, -1, -1):
        gs = (e >> (k + 1)) << (k + 1)  # start of the item's group in the current order
        bit = (e >> k) & 1
        zero = 1 - bit
        zb = np.cumsum(zero, dtype=it) - zero - (gs >> 1)  # 0s before the item in its group
        ones = bit.astype(bool)
        if wt is None:
            acc += bit * zb
        else:
            zw = wt * zero
            wex = np.cumsum(zw) - zw
            acc += np.where(ones, wex - wex[gs], 0)
        newpos = np.where(ones, idx - zb + (1 << k), gs + zb)
        for arr in (e, acc) if wt is None else (e, acc, wt):
            arr[newpos] = arr.copy()
    out = np.empty(n, np.int64)
    out[by_end] = acc  # after the last bit, position r holds the item whose end has rank r
    return out


def _order_distinct(values: np.ndarray) -> np.ndarray:
    """argsort of distinct non-negative integers, by counting when their range is small (O(range))."""
    v = np.asarray(values, np.int64)
    if v.size == 0:
        return np.zeros(0, np.int64)
    if v.size > 1 and bool(np.all(v[1:] > v[:-1])):
        return np.arange(v.size)
    hi = int(v.max()) + 1
    if v.min() < 0 or hi > 4 * v.size + 1024:
        return np.argsort(v, kind="stable")
    slot = np.full(hi, -1, np.int64)
    slot[v] = np.arange(v.size)
    return slot[slot >= 0]


def _prev_next(seq: np.ndarray, bounds: np.ndarray | None = None, *,
               want_next: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Previous / next access position of the same item (-1 / len(seq) when none).

    ``bounds``: epoch boundaries; when every epoch is a permutation of the same items the previous
    access is found through the previous epoch's inverse permutation (no sort). ``want_next`` False:
    the next positions are not computed (None), to spare their memory.
    """
    n = len(seq)
    prev = np.full(n, -1, np.int64)
    nxt = np.full(n, n, np.int64) if want_next else None
    if bounds is not None and len(bounds) > 2 and _permutation_epochs(seq, bounds):
        hi = int(seq.max()) + 1
        inv = np.empty(hi, np.int64)
        for e in range(1, len(bounds) - 1):
            a, b, c = bounds[e - 1], bounds[e], bounds[e + 1]
            inv[seq[a:b]] = np.arange(a, b)
            prev[b:c] = inv[seq[b:c]]
            if nxt is not None:
                nxt[prev[b:c]] = np.arange(b, c)
        return prev, nxt
    o = np.argsort(seq, kind="stable")
    same = seq[o][1:] == seq[o][:-1]
    prev[o[1:][same]] = o[:-1][same]
    if nxt is not None:
        nxt[o[:-1][same]] = o[1:][same]
    return prev, nxt


def _permutation_epochs(seq: np.ndarray, bounds: np.ndarray) -> bool:
    """Every epoch reads each of the same items exactly once."""
    hi = int(seq.max()) + 1
    ref = None
    for e in range(len(bounds) - 1):
        counts = np.bincount(seq[bounds[e]:bounds[e + 1]], minlength=hi)
        if counts.max(initial=0) > 1 or (ref is not None and not np.array_equal(counts, ref)):
            return False
        ref = counts
    return True


def lru_distances(seq, sizes=None, *, bounds=None) -> np.ndarray:
    """Stack distance of every access (bytes with ``sizes`` per item id, else items); inf for first accesses.

    Access t hits in an LRU cache of capacity C iff ``distance[t] <= C``. ``bounds`` (epoch boundaries,
    optional) only makes it faster.
    """
    seq = np.asarray(seq, np.int64)
    w = None if sizes is None else np.asarray(sizes, np.int64)[seq]
    prev, _ = _prev_next(seq, None if bounds is None else np.asarray(bounds), want_next=False)
    has = np.flatnonzero(prev >= 0)
    p = prev[has]
    del prev
    out = np.full(len(seq), np.inf)
    if has.size == 0:
        return out
    nested = _nested_sums(p, has, None if w is None else w[p])
    if w is None:  # unit weights: 1 + the accesses strictly between (cumsum of ones, without the arrays)
        out[has] = 1 + (has - 1 - p) - nested
        return out
    cum = np.cumsum(w)
    out[has] = w[has] + (cum[has - 1] - cum[p]) - nested
    return out


def static_thresholds(seq, sizes=None) -> np.ndarray:
    """Smallest static-cache capacity at which each access hits (inf: first access of its item)."""
    seq = np.asarray(seq, np.int64)
    if len(seq) == 0:
        return np.zeros(0)
    first_of = np.full(int(seq.max()) + 1, len(seq), np.int64)
    np.minimum.at(first_of, seq, np.arange(len(seq)))
    items = np.flatnonzero(first_of < len(seq))
    first = first_of[items]
    by_first = items[_order_distinct(first)]
    w = np.ones(len(by_first), np.int64) if sizes is None else np.asarray(sizes, np.int64)[by_first]
    need = np.zeros(int(seq.max()) + 1 if len(seq) else 0, np.float64)
    need[by_first] = np.cumsum(w)
    out = need[seq]
    is_first = np.zeros(len(seq), bool)
    is_first[first] = True
    out[is_first] = np.inf
    return out


def cache_hit_rates(epochs: list[np.ndarray], dataset_len: int | None = None, *, n_epochs: int | None = None,
                    fractions=DEFAULT_FRACTIONS, sizes_bytes=None, policies=POLICIES, kind: str | None = None,
                    seed: int = 0):
    """Hit rates per policy, cache size and epoch. One row each:

    ``policy, cache_frac, cache_bytes, epoch, accesses, hits, hit_rate, byte_hit_rate``. ``cache_frac`` is
    of the dataset's total size; ``cache_bytes`` is NaN without sizes. ``sizes_bytes``: per dataset index
    (array) or one number for every sample.
    """
    import pandas as pd

    seen = max((int(e.max()) + 1 for e in epochs if len(e)), default=0)
    n = max(int(dataset_len or 0), seen)
    eps = extend_epochs(epochs, n_epochs or max(len(epochs), 1), n, kind=kind, seed=seed)
    seq = np.concatenate(eps) if eps else np.zeros(0, np.int64)
    bounds = np.r_[0, np.cumsum([len(e) for e in eps])]
    n_eps = len(eps)
    del eps  # seq holds them
    per_item = None
    if sizes_bytes is not None and np.ndim(sizes_bytes) == 0:
        total = float(sizes_bytes) * n
        weights = np.full(len(seq), float(sizes_bytes))
    elif sizes_bytes is not None:
        per_item = np.asarray(sizes_bytes, np.int64)
        if len(per_item) < n:
            raise ValueError(f"sizes_bytes has {len(per_item)} entries for {n} samples")
        total = float(per_item[:n].sum())
        weights = per_item[seq].astype(np.float64)
    else:  # unit weights: made per epoch in the loop below (sums of ones: exact, the same)
        total, weights = float(n), None
    fr = np.asarray(fractions, np.float64)
    caps = fr * (total if per_item is not None else n)
    rows = []
    for policy in policies:
        v = lru_distances(seq, per_item, bounds=bounds) if policy == "lru" else static_thresholds(seq, per_item)
        # the smallest capacity index at which each access hits (len(caps): never)
        bucket = np.searchsorted(np.sort(caps), v, side="left")
        rank_of = np.argsort(np.argsort(caps, kind="stable"), kind="stable")
        nb = len(caps) + 1
        for e in range(n_eps):
            sel = slice(int(bounds[e]), int(bounds[e + 1]))
            w_e = np.ones(sel.stop - sel.start) if weights is None else weights[sel]
            hits = np.cumsum(np.bincount(bucket[sel], minlength=nb))[:-1]
            hbytes = np.cumsum(np.bincount(bucket[sel], weights=w_e, minlength=nb))[:-1]
            count, tot_w = bounds[e + 1] - bounds[e], float(w_e.sum())
            for f, r in zip(fr, rank_of, strict=True):
                rows.append({"policy": policy, "cache_frac": float(f),
                             "cache_bytes": float(f * total) if sizes_bytes is not None else np.nan,
                             "epoch": e, "accesses": int(count), "hits": int(hits[r]),
                             "hit_rate": float(hits[r]) / max(int(count), 1),
                             "byte_hit_rate": float(hbytes[r]) / tot_w if tot_w > 0 else 0.0})
    return pd.DataFrame(rows)


def steady_hit_rates(df):
    """Per (policy, cache_frac): the mean hit rate of the epochs after the first (the first if only one)."""
    later = df[df["epoch"] > 0] if (df["epoch"] > 0).any() else df
    g = later.groupby(["policy", "cache_frac"], sort=True)
    return g.agg(cache_bytes=("cache_bytes", "first"), hit_rate=("hit_rate", "mean"),
                 byte_hit_rate=("byte_hit_rate", "mean")).reset_index()


__all__ = ["DEFAULT_FRACTIONS", "POLICIES", "access_epochs", "cache_hit_rates", "extend_epochs", "lru_distances",
           "sampler_kind", "static_thresholds", "steady_hit_rates"]
