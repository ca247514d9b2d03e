"""Cache what-if: LRU stack distances and static thresholds against brute-force caches; hit-rate tables."""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np
import pytest

from lotus.model.cache import (
    access_epochs,
    cache_hit_rates,
    extend_epochs,
    lru_distances,
    sampler_kind,
    static_thresholds,
    steady_hit_rates,
)

pytestmark = pytest.mark.timeout(120)


def brute_lru(seq, sizes, cap) -> np.ndarray:
    """An LRU cache of ``cap`` bytes: evict least recent until the new item fits (none if it cannot)."""
    cache: OrderedDict = OrderedDict()
    total, hits = 0, []
    for x in seq:
        if x in cache:
            cache.move_to_end(x)
            hits.append(True)
            continue
        hits.append(False)
        cache[x] = sizes[x]
        total += sizes[x]
        while total > cap and cache:
            total -= cache.popitem(last=False)[1]
    return np.array(hits, bool)


def brute_static(seq, sizes, cap) -> np.ndarray:
    """Admit items on first access while they fit (the first that does not closes the cache); no eviction."""
    cached, seen, total, closed, hits = set(), set(), 0, False, []
    for x in seq:
        hits.append(x in cached)
        if x in seen:
            continue
        seen.add(x)
        if not closed and total + sizes[x] <= cap:
            cached.add(x)
            total += sizes[x]
        else:
            closed = True
    return np.array(hits, bool)


@pytest.mark.parametrize("sized", [False, True])
def test_lru_equals_brute_force(sized):
    rng = np.random.default_rng(0)
    for _ in range(150):
        n_items, n = int(rng.integers(1, 12)), int(rng.integers(1, 60))
        seq = rng.integers(0, n_items, n)
        sizes = rng.integers(1, 10, n_items) if sized else np.ones(n_items, int)
        d = lru_distances(seq, sizes if sized else None)
        for cap in range(int(sizes.sum()) + 2):
            assert np.array_equal(d <= cap, brute_lru(seq, sizes, cap)), (seq, sizes, cap)


def test_lru_fast_path_for_permutation_epochs_equals_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(100):
        n_items, n_epochs = int(rng.integers(1, 10)), int(rng.integers(2, 5))
        eps = [rng.permutation(n_items) for _ in range(n_epochs)]
        seq = np.concatenate(eps)
        bounds = np.r_[0, np.cumsum([len(e) for e in eps])]
        sizes = rng.integers(1, 10, n_items)
        d = lru_distances(seq, sizes, bounds=bounds)
        assert np.array_equal(d, lru_distances(seq, sizes))
        for cap in range(int(sizes.sum()) + 2):
            assert np.array_equal(d <= cap, brute_lru(seq, sizes, cap))


@pytest.mark.parametrize("sized", [False, True])
def test_static_equals_brute_force(sized):
    rng = np.random.default_rng(2)
    for _ in range(150):
        n_items, n = int(rng.integers(1, 10)), int(rng.integers(1, 40))
        seq = rng.integers(0, n_items, n)
        sizes = rng.integers(1, 8, n_items) if sized else np.ones(n_items, int)
        v = static_thresholds(seq, sizes if sized else None)
        for cap in range(int(sizes.sum()) + 2):
            assert np.array_equal(v <= cap, brute_static(seq, sizes, cap)), (seq, sizes, cap)


def test_known_hit_rates_of_a_sequential_scan():
    n = 1000
    df = cache_hit_rates([np.arange(n)], n, n_epochs=3, fractions=[0.0, 0.5, 0.99, 1.0])
    lru = df[df["policy"] == "lru"].set_index(["epoch", "cache_frac"])["hit_rate"]
    static = df[df["policy"] == "static"].set_index(["epoch", "cache_frac"])["hit_rate"]
    assert (df[df["epoch"] == 0]["hit_rate"] == 0).all()  # the cache starts empty
    assert lru[(1, 0.5)] == 0.0 and lru[(1, 0.99)] == 0.0 and lru[(2, 1.0)] == 1.0  # LRU thrashes on a scan
    assert static[(1, 0.5)] == 0.5 and static[(2, 0.99)] == 0.99 and static[(1, 1.0)] == 1.0
    steady = steady_hit_rates(df)
    assert set(steady.columns) >= {"policy", "cache_frac", "hit_rate", "byte_hit_rate"}


def test_random_epochs_sizes_and_byte_hit_rate():
    rng = np.random.default_rng(3)
    n = 2000
    sizes = rng.integers(1_000, 10_000, n)
    df = cache_hit_rates([rng.permutation(n)], n, n_epochs=3, sizes_bytes=sizes, fractions=[0.25, 0.5, 0.75])
    lru = df[(df["policy"] == "lru") & (df["epoch"] == 2)].set_index("cache_frac")
    assert 0 < lru.loc[0.25, "hit_rate"] < lru.loc[0.5, "hit_rate"] < lru.loc[0.75, "hit_rate"] < 0.75
    assert lru.loc[0.5, "cache_bytes"] == pytest.approx(0.5 * sizes.sum())
    st = df[(df["policy"] == "static") & (df["epoch"] == 1)].set_index("cache_frac")
    assert st.loc[0.5, "byte_hit_rate"] == pytest.approx(0.5, abs=0.01)
    # a scalar size is uniform: the same hit rates as no sizes
    a = cache_hit_rates([np.arange(50)], 50, n_epochs=2, sizes_bytes=4096.0)
    b = cache_hit_rates([np.arange(50)], 50, n_epochs=2)
    assert np.array_equal(a["hit_rate"], b["hit_rate"]) and a["cache_bytes"].notna().all()


def test_extend_epochs():
    assert sampler_kind([np.arange(10)]) == "sequential"
    rng = np.random.default_rng(4)
    assert sampler_kind([rng.permutation(100)]) == "random"
    eps = extend_epochs([np.array([0, 1, 2])], 3, 6)  # a partial sequential epoch is completed in order
    assert [e.tolist() for e in eps] == [[0, 1, 2, 3, 4, 5]] * 3
    rec = rng.permutation(100)
    a = extend_epochs([rec[:40]], 3, 100, seed=7)
    b = extend_epochs([rec[:40]], 3, 100, seed=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))  # fixed seed: reproducible
    assert np.array_equal(a[0][:40], rec[:40]) and all(sorted(e.tolist()) == list(range(100)) for e in a)
    assert not np.array_equal(a[1], a[2])


def test_access_order_from_a_trace(make_run):
    r = make_run("epochs2", epochs=2)
    eps = access_epochs(r.events)
    assert len(eps) == 2 and all(np.array_equal(e, np.arange(3200)) for e in eps)


def test_speed():
    """1.28M samples x 3 epochs x 21 sizes, both policies: seconds (benchmarks/model.py has the figure)."""
    n = 1_280_000
    t = time.perf_counter()
    df = cache_hit_rates([np.random.default_rng(5).permutation(n)], n, n_epochs=3)
    assert time.perf_counter() - t < 30
    assert len(df) == 2 * 3 * 21
