"""Issue 25: the cache what-if of ``lotus whatif`` reads its access order flat (lotus.model.accessorder):
only the simulated epochs' orders, and counters of the others; the same hit rates, epoch for epoch, as
the whole-run DataFrame path (lotus.model.scanaccess.access_events -> lotus.model.cache.access_epochs)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lotus.model import accessorder as ao
from lotus.model import cache, load_run, scanaccess
from lotus.model.cache import DEFAULT_FRACTIONS, access_epochs
from lotus.model.tables import cache_hits
from lotus.trace import chunks, events
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.model.test_scan_fit import _runs
from tests.trace.test_scan import native_from_events

pytestmark = pytest.mark.timeout(120)


def _write(ev: pd.DataFrame, directory) -> None:
    """``ev`` as version-1 trace files, one per process, with its rank (load events kept as they are)."""
    native_from_events(ev, directory, keep_ranks=True)


def _mixed(tmp_path, *, differ: int | None = None, no_samples: bool = False):
    """5 epochs x 2 ranks x 3 workers, epochs numbered backwards (later files hold smaller epochs), one
    fixed non-monotone order every epoch (``differ``: that epoch in another order), rank 0's sample events
    without an index (its load events come first: the reader switches), a second loader."""
    src = tmp_path / "src"
    write_native(src, PipelineSpec(n_batches=8, batch_size=4, n_workers=3, epochs=5, ranks=2, seed=7, cpus=4))
    ev = load_events(src)
    ev["epoch"] = np.where(ev["epoch"].to_numpy() >= 0, 4 - ev["epoch"].to_numpy(), ev["epoch"].to_numpy())
    s = ev["sample"].to_numpy().copy()
    has = s >= 0
    perm = np.random.default_rng(1).permutation(int(s.max()) + 1)
    s[has] = perm[s[has]]
    if differ is not None:
        other = np.random.default_rng(2).permutation(len(perm))
        late = has & (ev["epoch"].to_numpy() == differ)
        s[late] = other[ev["sample"].to_numpy()[late]]
    name = ev["name"].astype(str).to_numpy()
    s[(name == "sample") & ((ev["rank"].to_numpy() == 0) | no_samples)] = -1
    ev["sample"] = s
    val = ev[(ev["batch_id"].to_numpy() >= 0) & (ev["batch_id"].to_numpy() < 3)].copy()
    val["loader"] = 1
    ev = pd.concat([ev, val], ignore_index=True).sort_values(["pid", "start_ns"], kind="stable")
    out = tmp_path / ("differ" if differ is not None else "loads" if no_samples else "mixed")
    _write(ev, out)
    return out


def _same(run, n_epochs: int, dataset_len: int | None, loader=None) -> ao.AccessOrder:
    """The flat order and hit rates against the whole-run DataFrame path; returns the flat order."""
    whole = scanaccess.access_events(run)
    want = access_epochs(whole, loader=loader)
    got = ao.access_order(run, n_epochs, dataset_len, loader=loader)
    assert got.recorded == len(want)
    assert got.seen == max((int(e.max()) + 1 for e in want if len(e)), default=0)
    for g, w in zip(got.epochs, want[:n_epochs], strict=True):
        assert g.dtype in (np.dtype(np.int32), w.dtype) and np.array_equal(g, w)  # int32 where it fits
    if loader is None:
        kw = {"fractions": DEFAULT_FRACTIONS, "n_epochs": n_epochs}
        a, b = cache_hits(got, dataset_len, **kw), cache_hits(whole, dataset_len, **kw)
        assert (a is None) == (b is None)
        if a is not None:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
    return got


@pytest.fixture
def scan(monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setattr(chunks, "CHUNK_RECORDS", 97)  # chunk boundaries inside batches and epochs
    monkeypatch.setattr(events, "_CHUNK_RECORDS", 97)
    return monkeypatch


@pytest.mark.parametrize("kind", ["synth", "two-loaders"])
def test_flat_order_same_as_dataframe(kind, tmp_path, scan):
    run = load_run(_runs(kind, tmp_path)[0])
    seen = _same(run, 1, None).seen
    for n in (1, 2, 3):
        for dl in (None, seen, seen + 40):
            _same(run, n, dl)
    for loader in (0, 1, 5):
        _same(run, 2, None, loader=loader)


def test_flat_order_mixed_events(tmp_path, scan):
    """Loads before samples, epochs backwards, two loaders, a repeated shuffled order (its kind read again)."""
    calls = []
    read = ao._Collect.read
    scan.setattr(ao._Collect, "read", lambda self, engine: (calls.append(self.only), read(self, engine))[1])
    scan.setattr(ao, "RECHECK_ROWS", 1)  # one epoch a pass
    run = load_run(_mixed(tmp_path))
    seen = _same(run, 1, None).seen
    for n in (1, 2, 3, 5, 7):
        calls.clear()
        o = _same(run, n, seen + 30)  # partial epochs: the sampler's kind decides
        assert o.kind == "sequential"
        assert len(calls) == (1 + 5 - n if n < 5 else 1)  # the other epochs read again, one a pass
        assert _same(run, n, seen).kind in (None, "sequential")
    for loader in (0, 1):
        _same(run, 3, None, loader=loader)


@pytest.mark.parametrize("differ", [4, 1])  # an epoch read again / a kept one
def test_flat_order_one_epoch_differs(differ, tmp_path, scan):
    run = load_run(_mixed(tmp_path, differ=differ))
    seen = _same(run, 1, None).seen
    for n in (1, 2, 3):
        assert _same(run, n, seen + 30).kind == "random"


def test_flat_order_load_events_only(tmp_path, scan):
    run = load_run(_mixed(tmp_path, no_samples=True))
    o = _same(run, 2, None)
    assert o.recorded == 5 and len(o.epochs) == 2
    _same(run, 2, o.seen + 10)


def test_memory_run_order(tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    run = load_run(_runs("synth", tmp_path)[0])
    want = access_epochs(run.events)
    got = ao.access_order(run, 1, None)
    assert got.recorded == len(want) == 2 and np.array_equal(got.epochs[0], want[0]) and len(got.epochs) == 1


def test_whatif_flat_never_builds_the_whole_dataframe(tmp_path, scan):
    """The scanned run's cache what-if: no events DataFrame of the run; the same result as before."""
    from lotus.model import detail
    from lotus.model.report import whatif

    d = _runs("synth", tmp_path)[0]
    with scan.context() as m:  # the whole-run path, for reference
        m.setattr(ao, "access_order", lambda run, *a, **k: scanaccess.access_events(run))
        old = whatif(d, dataset_bytes=1e6, cache_gb=[0.0004], io_mb_s=100)

    def boom(*a, **k):
        raise AssertionError("the whole-run access DataFrame was built")

    scan.setattr(scanaccess, "access_events", boom)
    scan.setattr(cache, "access_epochs", boom)
    scan.setattr(detail, "detail_events", boom)
    new = whatif(d, dataset_bytes=1e6, cache_gb=[0.0004], io_mb_s=100)
    assert new.cache_epochs is not None and len(new.cache_epochs)
    pd.testing.assert_frame_equal(new.cache_epochs, old.cache_epochs, check_exact=True)
    assert json.dumps(new.to_dict(), default=str) == json.dumps(old.to_dict(), default=str)


def test_sensitivity_hit_rates_flat(tmp_path, scan):
    """lotus sensitivity's cache hit rates: the flat order, the same steady LRU rates as from every event."""
    from lotus.model import detail
    from lotus.model.cache import cache_hit_rates, steady_hit_rates
    from lotus.profile.sensitivity import _hit_rates

    run = load_run(_mixed(tmp_path))
    epochs = access_epochs(detail.detail_events(run))
    n = max((d.get("dataset_len") or 0 for d in run.loaders.values() if isinstance(d, dict)), default=0) or None
    want = steady_hit_rates(cache_hit_rates(epochs, n, n_epochs=3, policies=("lru",)))  # the code before
    scan.setattr(detail, "detail_events", lambda *a: pytest.fail("every event read"))
    pd.testing.assert_frame_equal(_hit_rates(run, 1e6), want, check_exact=True)
    assert _hit_rates(run, None) is None


def test_unit_weights_without_arrays_same():
    """cache_hit_rates without sizes (unit weights made per epoch, distances without the cumsum arrays)
    gives what per-item sizes of 1 give through the weighted arrays."""
    from lotus.model.cache import cache_hit_rates, lru_distances

    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        eps = [rng.integers(0, n, int(rng.integers(1, 2 * n))) for _ in range(int(rng.integers(1, 4)))]
        seq = np.concatenate(eps)
        assert np.array_equal(lru_distances(seq), lru_distances(seq, np.ones(n, np.int64)))
        a = cache_hit_rates(eps, n, n_epochs=3)
        b = cache_hit_rates(eps, n, n_epochs=3, sizes_bytes=np.ones(n, np.int64))
        cols = ["policy", "cache_frac", "epoch", "accesses", "hits", "hit_rate", "byte_hit_rate"]
        pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)


def test_segments_order_as_the_rows_do():
    """An epoch ordered from its segments (rows pre-sorted by batch and start, each batch's first and last
    start) is the stable sort of every row by (batch, rank, start); None exactly where pieces of one (batch,
    rank) overlap in time (then the epoch is read again with every row's start)."""
    rng = np.random.default_rng(5)
    fell_back = 0
    for case in range(1500):
        segs, cols, t = [], ([], [], [], []), 0
        for _s in range(int(rng.integers(1, 7))):
            n = int(rng.integers(1, 30))
            rank = int(rng.integers(0, 3))
            if case % 3 == 0:  # anything
                batch, start = rng.integers(0, 6, n), rng.integers(0, 20, n)
            else:  # a worker's file: batches in order, times rising, cut anywhere (a chunk's end)
                batch = np.sort(rng.integers(0, 6, n))
                start = t + np.cumsum(rng.integers(0 if case % 3 == 1 else 1, 3, n))
                t = int(start[-1]) - (int(rng.integers(0, 2)) if case % 3 == 1 else 0)
            sample = rng.integers(0, 1 << (8 if case % 2 else 40), n)
            sm, bt, st = ao._narrow(sample), ao._narrow(batch), start.astype(np.int64)
            segs.append(ao._Segment(sm, bt, st, rank))
            for c, v in zip(cols, (sm, bt, st, (n, rank)), strict=True):
                c.append(v)
        want = np.concatenate(cols[0])[np.lexsort((np.concatenate(cols[2]),
                                                    np.repeat([r for _, r in cols[3]], [k for k, _ in cols[3]]),
                                                    np.concatenate(cols[1])))]
        rows = ao._ordered_rows(cols)
        assert rows.dtype == want.dtype and np.array_equal(rows, want)
        got = ao._ordered(segs)
        if got is None:
            fell_back += 1
            continue
        assert got.dtype == want.dtype and np.array_equal(got, want), case
        if case % 3 == 2:
            assert got is not None  # strictly rising times in each file: never read again
    assert 0 < fell_back < 1500


def test_flat_order_batch_spread_over_files(tmp_path, scan):
    """A batch whose rows sit in two files of one rank, their times interleaved: its epoch is read again with
    every row's start time; the same order and hit rates as the whole-run DataFrame path."""
    calls = []
    reread = ao._reread_epoch
    scan.setattr(ao, "_reread_epoch", lambda *a: (calls.append(a[3]), reread(*a))[1])
    src = tmp_path / "src"
    write_native(src, PipelineSpec(n_batches=8, batch_size=4, n_workers=3, epochs=3, ranks=1, seed=7, cpus=4))
    ev = load_events(src)
    pid = ev["pid"].to_numpy().copy()
    workers = sorted(set(pid[(ev["worker_id"].to_numpy() >= 0)].tolist()))
    name = ev["name"].astype(str).to_numpy()
    moved = (ev["epoch"].to_numpy() == 1) & (ev["batch_id"].to_numpy() == 2) & np.isin(name, ["sample", "load"])
    moved &= np.arange(len(ev)) % 2 == 0  # every other row of that batch into another worker's file
    other = {w: workers[(workers.index(w) + 1) % len(workers)] for w in workers}
    pid[moved] = [other[p] for p in pid[moved]]
    ev["pid"] = pid
    ev = ev.sort_values(["pid", "start_ns"], kind="stable")
    out = tmp_path / "spread"
    _write(ev, out)
    run = load_run(out)
    for n in (1, 2, 3):
        calls.clear()
        _same(run, n, None)
        assert calls == ([1] if n >= 2 else [])
