"""Cache what-if from the recorded sample order: an LRU page cache and a static (MinIO/CoorDL) cache.

Pure numpy, every cache size at once:

* **LRU** (Mattson's inclusion property): access ``t`` of item ``x`` hits in an LRU cache of capacity
  ``C`` bytes iff its *stack distance* ``D_t`` -- the size of ``x`` plus the sizes of the distinct
  items accessed since the previous access of ``x`` -- is ``<= C`` (with eviction "least recent until
  the new item fits", the cache always holds the longest prefix of the recency stack that fits).
* **static**: items are admitted in order of first access while the admitted total fits (the first that
  does not fit closes the cache), never evicted; a later access hits iff its item was admitted.

Both start empty (a cold page cache at the first epoch). Sizes: ``sizes_bytes`` per dataset index, or
uniform. The order: per epoch, the dataset indices of the main loader's ``sample`` (else ``load``)
events, by batch then position, ranks interleaved batch by batch (one page cache per host).
``lotus whatif`` reads only the simulated epochs' orders (:mod:`lotus.model.accessorder`).

:func:`cache_hit_rates` makes the simulated epochs one at a time (:func:`iter_epochs`) and feeds them in
blocks to :class:`lotus.model.stackdist.Streams` (the algorithm: its module doc), keeping per epoch only a
histogram of the smallest capacity that hits. Memory, besides the caller's recorded epochs: ~22 bytes a
dataset item and one block's temporaries (+8 bytes an item while an epoch is completed or generated),
whatever the number of epochs: 290 MiB for 13.8M samples, 29 MiB for 1.38M (~7.4 bytes a simulated
access at 3 epochs); no per-access array of all the epochs.
"""

from __future__ import annotations

import numpy as np

from lotus.model.stackdist import Streams, block_size, distances

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
    return "sequential" if np.count_nonzero(e[1:] > e[:-1]) / (len(e) - 1) > 0.9 else "random"


def extend_epochs(epochs: list[np.ndarray], n_epochs: int, dataset_len: int, *, kind: str | None = None,
                  seed: int = 0) -> list[np.ndarray]:
    """``n_epochs`` full epochs: the recorded ones (completed when the run stopped early), then generated.

    A partial epoch is completed with the indices it did not read: in increasing order (sequential) or
    in a random order (random). Further epochs: the first epoch's order again (sequential), or random
    permutations from ``numpy.random.default_rng(seed)`` (random).
    """
    out: list[np.ndarray] = []
    for e in iter_epochs(epochs, n_epochs, dataset_len, kind=kind, seed=seed):
        mine = e.dtype == np.int64 and not any(e is f for f in out) and not any(e is f for f in epochs)
        out.append(e if mine else e.astype(np.int64))
    return out


def iter_epochs(epochs: list[np.ndarray], n_epochs: int, dataset_len: int, *, kind: str | None = None,
                seed: int = 0):
    """:func:`extend_epochs`' epochs one at a time (int64 or int32; a recorded or repeated epoch may be yielded
    as is).

    The sampler's kind is worked out only where an epoch is completed or generated."""
    rng = np.random.default_rng(seed)
    first = None
    for i, e in enumerate(epochs[:n_epochs]):
        seen = np.zeros(dataset_len, bool)
        if len(e) and e.min() >= 0 and e.max() < dataset_len:
            seen[e] = True
        else:
            seen[e[(e >= 0) & (e < dataset_len)]] = True
        rest = np.flatnonzero(~seen)
        del seen
        if rest.size:
            kind = kind or sampler_kind(epochs)
            rest = rest if kind == "sequential" else rng.permutation(rest)
            e = np.concatenate([e, rest])
        del rest
        if e.dtype != np.int32:  # int32 (an order read narrow) is simulated as is: no int64 copy
            e = np.asarray(e, np.int64)
        if i == 0 and n_epochs > len(epochs):
            kind = kind or sampler_kind(epochs)
            first = e if kind == "sequential" else None
        yield e
        del e
    for _ in range(min(len(epochs), n_epochs), n_epochs):
        kind = kind or sampler_kind(epochs)
        if kind == "sequential":
            yield first if first is not None else np.arange(dataset_len, dtype=np.int64)
        else:
            yield rng.permutation(dataset_len).astype(np.int64)


def lru_distances(seq, sizes=None, *, bounds=None) -> np.ndarray:
    """Stack distance of every access (bytes with ``sizes`` per item id, else items); inf for first accesses.

    Access t hits in an LRU cache of capacity C iff ``distance[t] <= C``. ``bounds`` (epoch boundaries) is
    accepted for compatibility and not needed.
    """
    return distances(seq, sizes, lru=True)


def static_thresholds(seq, sizes=None) -> np.ndarray:
    """Smallest static-cache capacity at which each access hits (inf: first access of its item)."""
    return distances(seq, sizes, lru=False)


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
    if any(len(e) and int(e.min()) < 0 for e in epochs):
        raise ValueError("dataset indices must be >= 0")
    n = max(int(dataset_len or 0), seen)
    n_eps = n_epochs or max(len(epochs), 1)
    per_item = scalar = None
    if sizes_bytes is not None and np.ndim(sizes_bytes) == 0:
        scalar = float(sizes_bytes)
        total = scalar * n
    elif sizes_bytes is not None:
        per_item = np.asarray(sizes_bytes, np.int64)
        if len(per_item) < n:
            raise ValueError(f"sizes_bytes has {len(per_item)} entries for {n} samples")
        total = float(per_item[:n].sum())
    else:
        total = float(n)
    fr = np.asarray(fractions, np.float64)
    caps = fr * (total if per_item is not None else n)
    sorted_caps = np.sort(caps)
    rank_of = np.argsort(np.argsort(caps, kind="stable"), kind="stable")
    nb = len(caps) + 1
    # a bound on the accesses (a recorded epoch can be longer than the dataset) for the positions' dtype
    bound = sum(len(e) for e in epochs[:n_eps]) + n * n_eps
    wanted = {"lru" if p == "lru" else "static" for p in policies}
    streams = Streams(n, bound, per_item, lru="lru" in wanted, static="static" in wanted)
    # per policy, per epoch: accesses, hits and bytes of hits by the smallest capacity index that hits
    hist: dict[str, list] = {p: [] for p in wanted}
    block = block_size(n)
    for ep in iter_epochs(epochs, n_eps, n, kind=kind, seed=seed):
        count = len(ep)
        if per_item is None and scalar is None:
            tot_w = float(count)  # the sum of ones
        else:  # the epoch's weights summed at once (numpy's pairwise sum, as the whole-sequence code did)
            tot_w = float((np.full(count, scalar) if per_item is None else per_item[ep].astype(np.float64)).sum())
        hits = {p: np.zeros(nb, np.int64) for p in wanted}
        hbytes = {p: np.zeros(nb) for p in wanted}
        for a in range(0, count, block):
            x = ep[a:a + block]
            d, s = streams.feed(x)
            w = None if per_item is None and scalar is None else (
                np.full(len(x), scalar) if per_item is None else per_item[x].astype(np.float64))
            for p, v in (("lru", d), ("static", s)):
                if v is None:
                    continue
                bucket = np.searchsorted(sorted_caps, v, side="left")  # len(caps): no capacity hits
                del v
                hits[p] += np.bincount(bucket, minlength=nb)
                if w is not None:  # continue each bin's running sum in access order (bincount adds in order)
                    hbytes[p] = np.bincount(np.concatenate((np.arange(nb), bucket)),
                                            weights=np.concatenate((hbytes[p], w)), minlength=nb)
            del d, s, x, w
        for p in wanted:
            hb = hits[p].astype(np.float64) if per_item is None and scalar is None else hbytes[p]
            hist[p].append((count, tot_w, np.cumsum(hits[p])[:-1], np.cumsum(hb)[:-1]))
        del ep
    rows = []
    for policy in policies:
        for e, (count, tot_w, hits, hb) in enumerate(hist["lru" if policy == "lru" else "static"]):
            for f, r in zip(fr, rank_of, strict=True):
                rows.append({"policy": policy, "cache_frac": float(f),
                             "cache_bytes": float(f * total) if sizes_bytes is not None else np.nan,
                             "epoch": e, "accesses": int(count), "hits": int(hits[r]),
                             "hit_rate": float(hits[r]) / max(int(count), 1),
                             "byte_hit_rate": float(hb[r]) / tot_w if tot_w > 0 else 0.0})
    return pd.DataFrame(rows)


def steady_hit_rates(df):
    """Per (policy, cache_frac): the mean hit rate of the epochs after the first (the first if only one)."""
    later = df[df["epoch"] > 0] if (df["epoch"] > 0).any() else df
    g = later.groupby(["policy", "cache_frac"], sort=True)
    return g.agg(cache_bytes=("cache_bytes", "first"), hit_rate=("hit_rate", "mean"),
                 byte_hit_rate=("byte_hit_rate", "mean")).reset_index()


__all__ = ["DEFAULT_FRACTIONS", "POLICIES", "access_epochs", "cache_hit_rates", "extend_epochs", "lru_distances",
           "sampler_kind", "static_thresholds", "steady_hit_rates"]
