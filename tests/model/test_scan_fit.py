"""Issue 17, the model's fitting out of core: a run read by the scan engine (its per-sample events read
from the files in chunks, :mod:`lotus.model.scandetail`; op distributions from streams,
:mod:`lotus.model.streams`) gives the very model of the in-memory path: the same JSON and the same
per-batch arrays, with every size forced small so that the chunked, spilled code runs on small runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import exactstats
from lotus.analysis.jsonutil import dumps
from lotus.analysis.stats import op_engine
from lotus.model import fit, load_run, observe
from lotus.model import scandetail as sd
from lotus.model.params import Dist
from lotus.model.streams import Pooled, dist_of
from lotus.query import batchtable, spill, tablebuild
from lotus.trace import chunks, events
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.trace.outcome_run import write_outcome_run
from tests.trace.test_scan import REAL, native_from_events

pytestmark = pytest.mark.timeout(180)


def _small(m) -> None:
    m.setattr(batchtable, "ROWS", 3)
    m.setattr(exactstats, "CHUNK", 5)
    m.setattr(tablebuild, "BLOCK", 16)
    m.setattr(spill, "MIN_BYTES", 0)
    m.setattr(chunks, "CHUNK_RECORDS", 97)  # chunk boundaries inside batches (the memory path reads alike)
    m.setattr(events, "_CHUNK_RECORDS", 97)
    m.setattr(sd, "SLICE_ROWS", 13)


def _model(runs, engine, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", engine)
    loaded = [load_run(r) for r in runs]
    assert all((op_engine(r.events) is not None) == (engine == "scan") for r in loaded)
    return fit(loaded), [observe(r) for r in loaded]


def _same(a, b) -> None:
    """The same model: its JSON, and the per-batch arrays the simulator resamples."""
    (ma, oa), (mb, ob) = a, b
    assert dumps(ma.to_dict()) == dumps(mb.to_dict())
    for f in ("n", "items_ns", "load_ns", "cold_reads", "collate_ns", "other_ns", "handoff_ns", "dispatch_ns"):
        assert np.array_equal(getattr(ma.measured, f), getattr(mb.measured, f)), f
    assert ma.measured.step_ns.keys() == mb.measured.step_ns.keys()
    for x, y in zip(oa, ob, strict=True):
        assert x.reread == y.reread and np.array_equal(x.first_reads, y.first_reads)
        assert list(x.op_ns) == list(y.op_ns)
        for k, v in x.op_ns.items():
            assert np.array_equal(_values(v), _values(y.op_ns[k])), k


def _values(v) -> np.ndarray:
    return v if isinstance(v, np.ndarray) else v.read(0, v.n) if v.spilled else v.array()


def _budget_run(tmp_path):
    from tests.dataloader.test_detail_budget import write_budget_run

    return write_budget_run(tmp_path / "budget")


def _runs(kind, tmp_path):
    if kind == "synth":  # 3 workers, 2 ranks, 2 epochs of the same samples: re-reads
        write_native(tmp_path / "s", PipelineSpec(n_batches=20, batch_size=4, n_workers=3, epochs=2, ranks=2,
                                                  seed=11, cpus=4))
        return [tmp_path / "s"]
    if kind == "outcome":  # failed and exhausted fetches
        return [write_outcome_run(tmp_path / "o")]
    if kind == "real":
        return [native_from_events(load_events(REAL / "b256_gpu2"), tmp_path / "real")]
    if kind == "pooled":  # two runs at other worker and CPU counts: pooled op streams, the CPU fit
        for name, nw, cpus in (("a", 2, 4), ("b", 4, 2)):
            write_native(tmp_path / name, PipelineSpec(n_batches=30, batch_size=4, n_workers=nw, epochs=1,
                                                       seed=3, cpus=cpus))
        return [tmp_path / "a", tmp_path / "b"]
    if kind == "two-loaders":  # a validation loader beside the main one; loads of unknown samples
        write_native(tmp_path / "s1", PipelineSpec(n_batches=20, batch_size=4, n_workers=2, epochs=2, seed=4))
        ev = load_events(tmp_path / "s1")
        val = ev[(ev["batch_id"].to_numpy() < 6) & (ev["batch_id"].to_numpy() >= 0)].copy()
        val["loader"] = 1
        ev = pd.concat([ev, val], ignore_index=True).sort_values(["pid", "start_ns"], kind="stable")
        unknown = (ev["name"].to_numpy() == "load") & (ev["sample"].to_numpy() % 7 == 0)
        ev.loc[unknown, "sample"] = -1
        return [native_from_events(ev, tmp_path / "two")]
    return [_budget_run(tmp_path)]


@pytest.mark.parametrize("kind", ["synth", "outcome", "real", "pooled", "two-loaders",
                                  pytest.param("budget", marks=pytest.mark.detail_budget)])
def test_scanned_run_same_model(kind, tmp_path, monkeypatch):
    runs = _runs(kind, tmp_path)
    mem = _model(runs, "memory", monkeypatch)
    _same(_model(runs, "scan", monkeypatch), mem)
    with monkeypatch.context() as m:
        _small(m)
        mem_small = _model(runs, "memory", m)
        _same(mem_small, mem)  # forced sizes change nothing on the DataFrame path
        small = _model(runs, "scan", m)
        streams = [s for o in small[1] for s in o.op_ns.values()]
        assert streams and any(s.spilled for s in streams)
        _same(small, mem)
    if kind in ("synth", "two-loaders"):
        assert all(o.reread is not None and o.first_reads.sum() > 0 for o in mem[1])
    if kind == "two-loaders":
        assert load_run(runs[0]).batches["loader"].nunique() == 2
    if kind == "budget":
        b = load_run(runs[0]).batches
        assert 0 < b["detail"].mean() < 1


def test_auto_engine_by_size(tmp_path, monkeypatch):
    run = tmp_path / "s"
    write_native(run, PipelineSpec(n_batches=10, batch_size=2, n_workers=2, seed=1))
    monkeypatch.delenv("LOTUS_ENGINE", raising=False)
    assert op_engine(load_run(run).events) is None
    monkeypatch.setenv("LOTUS_SCAN_BYTES", "100")
    assert op_engine(load_run(run).events) is not None


def _reference(sample, start, dur, row, nb):
    """What lotus.model.measures.rereads computes of the matched loads."""
    o = np.argsort(start, kind="stable")
    _, idx = np.unique(sample[o], return_index=True)
    is_first = np.zeros(len(sample), bool)
    is_first[o[idx]] = True
    first = np.bincount(row[is_first], minlength=nb).astype(np.float64)
    nf, nr = int(is_first.sum()), int((~is_first).sum())
    return first, (float(dur[is_first].mean()), float(dur[~is_first].mean()), nf, nr) if nr else None


@pytest.mark.parametrize("dense", [True, False])
def test_first_reads_in_chunks(dense, monkeypatch):
    rng = np.random.default_rng(7)
    n, nb = 5000, 40
    sample = rng.integers(0, 300, n) * (1 if dense else 10**9)
    start = rng.integers(0, 2000, n)  # many equal starts: the earlier event wins
    dur = rng.integers(1, 10**7, n)
    row = rng.integers(0, nb, n)
    monkeypatch.setattr(sd, "DENSE_SLOTS", 1 << 24 if dense else 0)
    fr = sd.FirstReads()
    for i in range(0, n, 333):
        fr.add(sample[i: i + 333], start[i: i + 333], row[i: i + 333], dur[i: i + 333])
    assert (fr.ids is None) == dense
    first, rr = fr.result(nb)
    ref_first, ref_rr = _reference(sample, start, dur, row, nb)
    assert np.array_equal(first, ref_first) and rr == ref_rr


def test_pooled_dist_is_numpys(monkeypatch):
    rng = np.random.default_rng(1)
    parts = []
    for k in range(3):
        fl = exactstats.Floats(limit=0, chunk=7)
        a = rng.integers(1, 10**8, 1000 + 37 * k).astype(np.float64)
        for i in range(0, len(a), 100):
            fl.add(a[i: i + 100])
        parts.append((fl if k != 1 else a, 1.0 + 0.37 * k))
    want = Dist.of_ns(np.concatenate([_values(p) / s for p, s in parts]))
    monkeypatch.setattr(exactstats, "CHUNK", 11)
    assert Pooled(parts).n > exactstats.CHUNK
    assert dist_of(parts) == want
    assert dist_of([(None, 1.0), (parts[1][0], 1.37)]) == Dist.of_ns(parts[1][0] / 1.37)


def test_batch_rows_dense_and_sorted(monkeypatch):
    """The direct lookup matches what np.searchsorted on the sorted keys matches (the DataFrame path's)."""
    rng = np.random.default_rng(2)
    rank, epoch = rng.integers(0, 3, 400), rng.integers(0, 4, 400)
    keys = np.unique(sd.batch_keys(rank, epoch, rng.integers(0, 300, 400)))
    rng.shuffle(keys)
    ev = np.r_[keys, sd.batch_keys(rng.integers(-1, 4, 3000), rng.integers(-1, 5, 3000), rng.integers(-2, 400, 3000))]
    order = np.argsort(keys)
    pos = np.searchsorted(keys, ev, sorter=order).clip(0, len(keys) - 1)
    want = np.where(keys[order[pos]] == ev, order[pos], -1)
    dense = sd.BatchRows(keys)
    assert dense.groups is not None and np.array_equal(dense(ev), want)
    assert np.array_equal(dense(ev[:50]), want[:50]) and np.array_equal(dense(ev[:0]), want[:0])
    monkeypatch.setattr(sd, "DENSE_SLOTS", -len(keys))
    sparse = sd.BatchRows(keys)
    assert sparse.groups is None and np.array_equal(sparse(ev), want)


def test_fit_scan_keeps_no_op_stats(tmp_path, monkeypatch):
    """The model's scan skips the per-op statistics it does not read; asking the engine for them raises."""
    run = tmp_path / "s"
    write_native(run, PipelineSpec(n_batches=10, batch_size=2, n_workers=2, seed=1))
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    eng = op_engine(load_run(run).events)
    assert not eng.op_stats
    with pytest.raises(RuntimeError, match="no per-op statistics"):
        eng.op_table()


def test_whatif_with_cache_on_a_scanned_run(tmp_path, monkeypatch):
    """lotus whatif's tables, the cache what-if included (it reads every event of a scanned run), are the
    in-memory path's."""
    from lotus.model.report import whatif

    run = tmp_path / "s"
    write_native(run, PipelineSpec(n_batches=20, batch_size=4, n_workers=2, epochs=2, seed=9, cpus=4))
    out = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        w = whatif(run, workers=[1, 2], cpus=[2.0, 4.0], cache_gb=[0.001], dataset_bytes=1e6)
        assert w.cache is not None
        out[engine] = dumps(w.to_dict())
    assert out["scan"] == out["memory"]
