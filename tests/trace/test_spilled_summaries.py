"""Issue 17, flat memory: the per-batch columns on disk (:mod:`lotus.query.spill`), the summaries read a
view of rows at a time and whole-run statistics from streams (:mod:`lotus.analysis.exactstats`). With
every size forced small, so that the chunked, spilled code runs on small runs, the results are those
of the in-memory table and of the DataFrame path, byte for byte; a full disk is one line."""

from __future__ import annotations

import errno
import os

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import compactverdict, exactstats, overlap
from lotus.analysis.compact import wait_table
from lotus.analysis.diagnosis import verdict
from lotus.analysis.exactstats import Floats, describe, pairwise_sum, percentiles
from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from lotus.analysis.stats import config_stats, describe_clean, preprocessing_stats
from lotus.analysis.wait import wait_stats
from lotus.query import batchtable, spill, tablebuild
from lotus.query.batchtable import BatchTable
from tests.trace.test_summary_columns import _run


def _small(monkeypatch, rows: int = 3) -> None:
    monkeypatch.setattr(batchtable, "ROWS", rows)
    monkeypatch.setattr(exactstats, "CHUNK", 5)
    monkeypatch.setattr(tablebuild, "BLOCK", 16)
    monkeypatch.setattr(spill, "MIN_BYTES", 0)


def _summaries(run, monkeypatch) -> list[str]:
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    cfg = load_config(run, engine="auto", summary_only=True)
    t, ev = cfg.table, cfg.events
    out = [dumps(config_stats(ev, t, remove_outliers=ro)) for ro in (False, True)]
    out += [dumps(preprocessing_stats(t, remove_outliers=ro, by="rank")) for ro in (False, True)]
    out += [dumps(verdict(ev, t, loaders=cfg.loaders)), dumps(wait_stats(t))]
    if wait_stats(t)["known"]:
        out += [wait_table(t, sort=s).to_json() for s in ("batch_id", "duration")]
    return out


@pytest.mark.parametrize("kind", ["synth", "outcome", "gpu", "real"])
def test_spilled_views_same_summaries(kind, tmp_path, monkeypatch):
    run = _run(kind, tmp_path)
    whole = _summaries(run, monkeypatch)
    with monkeypatch.context() as m:
        _small(m)
        cfg = load_config(run, engine="auto", summary_only=True)
        assert len(cfg.table) > batchtable.ROWS and spill.is_spilled(cfg.table.raw["prep_dur_ns"])
        assert _summaries(run, m) == whole
    monkeypatch.setenv("LOTUS_ENGINE", "memory")  # and the DataFrame path's
    mem = load_config(run, engine="memory")
    assert dumps(wait_stats(mem.batches)) == whole[5]
    assert dumps(verdict(mem.events, mem.batches, loaders=mem.loaders)) == whole[4]


def test_pairwise_sum_is_numpys():
    rng = np.random.default_rng(3)
    for n in [*range(0, 300, 7), 1023, 8193, 100_003]:
        a = rng.standard_normal(n) * 1e3 + rng.random(n)
        for chunk in (1, 100, 128, 1000, 1 << 19):
            assert pairwise_sum(lambda o, m, a=a: a[o: o + m], 0, n, chunk) == np.add.reduce(a)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 130, 1000, 20_011])
def test_streamed_describe_is_describe_ms(n):
    rng = np.random.default_rng(n)
    for a in (rng.standard_normal(n) * 10 + 50, rng.integers(0, 4, n) / 1e6,
              rng.integers(1, 10**9, n) / 1e6, rng.standard_normal(n)):
        fl = Floats(limit=0 if n > 1 else 1, chunk=37)
        for i in range(0, n, 101):
            fl.add(a[i: i + 101])
        assert describe(fl) == describe_clean(a)
        assert np.array_equal(percentiles(fl, [0, 25, 33, 100]), np.percentile(a, [0, 25, 33, 100]))
        fl.close()


def _table(rng, n_groups: int = 3, n: int = 40) -> BatchTable:
    """A table of random columns: consumption times with ties, missing values, failed batches."""
    counts = np.full(n_groups, n, np.int64)
    size = n * n_groups
    miss = np.iinfo(np.int64).min

    def col(lo, hi, p_missing=0.2):
        v = rng.integers(lo, hi, size).astype(np.int64)
        v[rng.random(size) < p_missing] = miss
        return v

    raw = {"consumed_ns": col(0, 30), "wait_dur_ns": col(1, 1000), "wait_start_ns": col(0, 50),
           "prep_dur_ns": col(1, 1000), "prep_start_ns": col(0, 50), "worker_id": col(0, 3, 0.1),
           "_fetch_flags": np.where(rng.random(size) < 0.1, 1, 0).astype(np.int64)}
    keys = np.array([[0, 0, e] for e in range(n_groups)], np.int64)
    return BatchTable(keys, counts, np.tile(np.arange(n), n_groups), raw, {"path": "t"})


def _startup_reference(t) -> float:  # the whole-table formula (lotus.analysis.compact before the views)
    from lotus.analysis.compact import _first_per_group, _loop_rows

    sel = _loop_rows(t)
    return float(t.values("wait_dur_ns", _first_per_group(t, sel, "consumed_ns"))[0].sum()) if len(sel) else 0.0


@pytest.mark.parametrize("seed", range(6))
def test_verdict_parts_by_views(seed, monkeypatch):
    t = _table(np.random.default_rng(seed))
    fns = ("startup_wait_ns", "first_batch_wait_ns", "_epoch_spans", "prep_total_ns")
    whole = {f: getattr(compactverdict, f)(t) for f in fns}
    frames = {f: getattr(compactverdict, f)(t) for f in ("loop_spans", "worker_utilisation")}
    assert whole["startup_wait_ns"] == _startup_reference(t)
    for rows in (1, 5, 13):
        monkeypatch.setattr(batchtable, "ROWS", rows)
        assert {f: getattr(compactverdict, f)(t) for f in fns} == whole
        for f, frame in frames.items():
            pd.testing.assert_frame_equal(getattr(compactverdict, f)(t), frame)


def test_spill_files_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_SPILL_DIR", str(tmp_path))
    a = spill.array(1 << 20, np.int64, -5)
    fl = Floats(limit=2)
    fl.add(np.arange(10.0))
    assert spill.is_spilled(a) and int(a[12345]) == -5 and fl.spilled
    assert os.listdir(tmp_path) == []  # unlinked as soon as made: gone even if the process is killed
    spill.drop(a)
    assert int(a[-1]) == -5 and np.array_equal(fl.read(3, 4), [3.0, 4.0, 5.0, 6.0])
    fl.close()


def test_full_disk_is_one_line(tmp_path, monkeypatch):
    from tests.cli.conftest import run

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    monkeypatch.setattr(spill, "MIN_BYTES", 0)
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    res = run("analyze", "verdict", "-d", _run("synth", tmp_path), ok=False)
    assert res.exit_code == 1
    err = (res.stderr or res.output).strip()
    assert len(err.splitlines()) == 1 and "no space left" in err and "LOTUS_SPILL_DIR" in err
    if os.path.exists("/dev/full"):  # a stream's file: writes to /dev/full fail as on a full disk
        fl = Floats(limit=0)
        fl._file = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 (closed by the error)
        with pytest.raises(spill.SpillError, match="no space left"):
            fl._write(np.zeros(3))
        assert fl._file is None


def test_without_mmap_the_arrays_stay_in_memory_with_the_same_summaries(tmp_path, monkeypatch):
    """A system whose C library has no mmap/madvise (spill._libc None): plain arrays, same results."""
    run = _run("synth", tmp_path)
    whole = _summaries(run, monkeypatch)
    with monkeypatch.context() as m:
        _small(m)
        m.setattr(spill, "_libc", None)
        cfg = load_config(run, engine="auto", summary_only=True)
        assert len(cfg.table) > batchtable.ROWS and not spill.is_spilled(cfg.table.raw["prep_dur_ns"])
        assert _summaries(run, m) == whole


@pytest.mark.parametrize("kind", ["synth", "gpu", "real"])
def test_verdict_passes_at_once_same_as_in_turn(kind, tmp_path, monkeypatch):
    """The verdict's passes over a spilled table in two threads (each dropping the pages it read while the
    other reads: lotus.analysis.overlap) give the bytes of one thread."""
    run = _run(kind, tmp_path)
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    _small(monkeypatch)
    cfg = load_config(run, engine="auto", summary_only=True)
    got = {}
    for n in (1, 2):
        monkeypatch.setattr(overlap, "cpus", lambda n=n: n)
        got[n] = dumps(verdict(cfg.events, cfg.table, loaders=cfg.loaders))
    assert got[1] == got[2]
