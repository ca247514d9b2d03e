"""The streamed LRU / static simulation (lotus.model.stackdist) against explicit caches, block sizes down to 1."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.model import stackdist
from lotus.model.cache import cache_hit_rates, extend_epochs
from tests.model.test_cache import brute_lru, brute_static

pytestmark = pytest.mark.timeout(60)


def test_earlier_greater_equals_quadratic():
    rng = np.random.default_rng(10)
    for _ in range(200):
        m = int(rng.integers(0, 70))
        v = rng.permutation(3 * m + 1)[:m] - m  # distinct, some negative
        w = rng.integers(1, 1000, m)
        want_n = [int(np.sum(v[:t] > v[t])) for t in range(m)]
        want_w = [int(np.sum(w[:t][v[:t] > v[t]])) for t in range(m)]
        assert stackdist.earlier_greater(v).tolist() == want_n
        assert stackdist.earlier_greater(v, w).tolist() == want_w


@pytest.mark.parametrize("block", [1, 2, 5, 1 << 16])
def test_streamed_hit_rates_equal_explicit_caches(monkeypatch, block):
    """cache_hit_rates' hits, per epoch and capacity, against an OrderedDict LRU and a set-based static cache
    over the same extended epochs: unit, scalar and per-item sizes, partial / repeated / random epochs."""
    monkeypatch.setattr(stackdist, "BLOCK", block)
    monkeypatch.setattr(stackdist, "MIN_BLOCK", block)
    rng = np.random.default_rng(block)
    for _ in range(40):
        n = int(rng.integers(1, 14))
        recorded = []
        for _ in range(int(rng.integers(0, 3))):
            mode = int(rng.integers(0, 3))
            if mode == 0:
                recorded.append(rng.permutation(n))
            elif mode == 1:  # stopped early
                recorded.append(rng.permutation(n)[: int(rng.integers(0, n + 1))])
            else:  # items read more than once (e.g. padded shards)
                recorded.append(rng.integers(0, n, int(rng.integers(1, 2 * n + 1))))
        n_epochs = int(rng.integers(1, 5))
        kind = [None, "sequential", "random"][int(rng.integers(0, 3))]
        how = int(rng.integers(0, 3))
        sizes = rng.integers(1, 9, n) if how == 2 else None
        fractions = np.round(np.linspace(0, 1, 11), 4)
        df = cache_hit_rates(recorded, n, n_epochs=n_epochs, fractions=fractions, kind=kind, seed=3,
                             sizes_bytes=sizes if how == 2 else (512.0 if how == 1 else None))
        eps = extend_epochs(recorded, n_epochs, n, kind=kind, seed=3)
        seq = np.concatenate(eps)
        w = sizes if sizes is not None else np.ones(n, np.int64)
        cap_of = fractions * (w.sum() if sizes is not None else n)
        bounds = np.r_[0, np.cumsum([len(e) for e in eps])]
        for policy, brute in (("lru", brute_lru), ("static", brute_static)):
            rows = df[df["policy"] == policy]
            for f, cap in zip(fractions, cap_of, strict=True):
                hit = brute(seq, w, cap)
                for e in range(n_epochs):
                    got = rows[(rows["epoch"] == e) & (rows["cache_frac"] == f)].iloc[0]
                    h = hit[bounds[e]:bounds[e + 1]]
                    assert got["hits"] == int(h.sum()), (policy, recorded, n_epochs, kind, sizes, f, e)
                    ew = w[eps[e]]
                    want_b = float(ew[h].sum()) / float(ew.sum()) if len(ew) else 0.0
                    assert got["byte_hit_rate"] == pytest.approx(want_b, rel=1e-12)


def test_blocks_do_not_change_distances(monkeypatch):
    """One block or many: the same distances and thresholds (positions carried across blocks)."""
    rng = np.random.default_rng(11)
    seq = np.concatenate([rng.permutation(300), rng.integers(0, 300, 500), rng.permutation(300)])
    sizes = rng.integers(1, 10_000, 300)
    want = [stackdist.distances(seq, s, lru=lru) for s in (None, sizes) for lru in (True, False)]
    for block in (1, 3, 64):
        monkeypatch.setattr(stackdist, "BLOCK", block)
        monkeypatch.setattr(stackdist, "MIN_BLOCK", block)
        got = [stackdist.distances(seq, s, lru=lru) for s in (None, sizes) for lru in (True, False)]
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
