"""``lotus analyze stats|wait|verdict`` keep only the per-batch columns they read (issue 17, flat memory):
the same batches, warnings and summaries as the full table; the batches DataFrame of such a run comes
from another scan; the head-of-line replay in blocks gives the very floats of whole-group numpy calls;
rows taken before widening give the values of the whole column."""

from __future__ import annotations

import itertools
import logging
import shutil

import numpy as np
import pandas as pd
import pytest

from lotus.analysis.compact import wait_table
from lotus.analysis.diagnosis import verdict
from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from lotus.analysis.stats import config_stats, preprocessing_stats
from lotus.analysis.wait import hol_arrays, wait_stats
from lotus.query.batches import BATCH_COLUMNS
from lotus.query.batchparts import COLUMNS, SUMMARY_COLUMNS
from lotus.query.outcomes import outcome_summary
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.analysis.test_gpu import write_gpu_run
from tests.trace.outcome_run import write_outcome_run
from tests.trace.test_scan import REAL, native_from_events

SPEC = PipelineSpec(n_batches=20, batch_size=4, n_workers=3, epochs=3, ranks=2, seed=11)


def _run(kind, tmp_path):
    if kind == "synth":
        write_native(tmp_path / "s", SPEC)
        return tmp_path / "s"
    if kind == "outcome":
        return write_outcome_run(tmp_path / "o")
    if kind == "gpu":
        write_gpu_run(tmp_path / "g", ranks=(0, 1))
        return tmp_path / "g"
    return native_from_events(load_events(REAL / "b256_gpu2"), tmp_path / "real")


def _both(run, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    return load_config(run, engine="auto"), load_config(run, engine="auto", summary_only=True)


@pytest.mark.parametrize("kind", ["synth", "outcome", "gpu", "real"])
def test_summary_columns_same_summaries(kind, tmp_path, monkeypatch):
    full, part = _both(_run(kind, tmp_path), monkeypatch)
    t, p, ev = full.table, part.table, part.events
    assert p.partial and not t.partial and set(p.raw) <= SUMMARY_COLUMNS and p.nbytes <= t.nbytes
    assert len(p) == len(t) and np.array_equal(p.batch_id, t.batch_id) and np.array_equal(p.keys, t.keys)
    assert {k: v for k, v in p.attrs.items() if k != "op_engine"} == \
        {k: v for k, v in t.attrs.items() if k != "op_engine"}
    for ro in (False, True):
        assert dumps(config_stats(ev, p, remove_outliers=ro)) == dumps(config_stats(full.events, t, remove_outliers=ro))
        assert dumps(preprocessing_stats(p, remove_outliers=ro, by="rank")) == \
            dumps(preprocessing_stats(t, remove_outliers=ro, by="rank"))
    assert dumps(verdict(ev, p, loaders=part.loaders)) == dumps(verdict(full.events, t, loaders=full.loaders))
    assert dumps(wait_stats(p)) == dumps(wait_stats(full.batches))
    assert outcome_summary(p) == outcome_summary(full.batches)
    if wait_stats(p)["known"]:
        for sort in ("batch_id", "duration"):
            pd.testing.assert_frame_equal(wait_table(p, sort=sort), wait_table(t, sort=sort))


def test_partial_table_batches_from_another_scan(tmp_path, monkeypatch):
    full, part = _both(_run("gpu", tmp_path), monkeypatch)
    with pytest.raises(RuntimeError):
        part.table.frame()
    pd.testing.assert_frame_equal(part.batches, full.batches)  # cfg.batches scans again, every column kept


def test_duplicates_of_dropped_kinds_warn_alike(tmp_path, monkeypatch, caplog):
    run = _run("synth", tmp_path)
    shutil.copy(sorted(run.glob("*-main-*"))[0], run / "lotus-r0-main-p99999.lotustrace")  # main events twice
    warnings = []
    for summary_only in (False, True):
        monkeypatch.setenv("LOTUS_ENGINE", "scan")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lotus.trace"):
            load_config(run, engine="auto", summary_only=summary_only)
        warnings.append(sorted(r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()))
    assert warnings[0] == warnings[1] and any("'step'" in w for w in warnings[0])


def test_values_of_rows_are_the_columns(tmp_path, monkeypatch):
    full, _ = _both(_run("outcome", tmp_path), monkeypatch)
    t = full.table
    rows = np.array([0, 2, len(t) - 1, 1, 2])
    names = [c for c in BATCH_COLUMNS if c not in ("n_samples", "status", "detail")] + list(COLUMNS)
    for c in names:
        v, ok = t.values(c)
        w, w_ok = t.values(c, rows)
        assert np.array_equal(ok[rows], w_ok) and np.array_equal(v[rows][w_ok], w[w_ok]), c
        if c in t.raw:
            assert np.array_equal(t.valid(c), ok) and np.array_equal(t.valid(c, rows), w_ok), c
    assert np.array_equal(t.group_ids(rows), t.group_ids()[rows])


def _hol_whole(starts, ws, wd, ready):
    """hol_arrays as it was before blocks: one numpy call per group (the reference)."""
    blocked, ooo = np.zeros(len(wd)), wd.copy()
    for a, b in itertools.pairwise([*starts.tolist(), len(wd)]):
        r = ready[a:b]
        later = np.append(np.minimum.accumulate(np.where(np.isnan(r), np.inf, r)[::-1])[::-1][1:], np.inf)
        end = ws[a:b] + wd[a:b]
        own = np.where(np.isnan(r), end, r)
        blocked[a:b] = np.clip(np.minimum(end, own) - np.maximum(ws[a:b], later), 0, wd[a:b])
        if not np.isnan(r).any():
            w, d, served = ws[a:b], wd[a:b], np.sort(r)
            h = np.maximum(0.0, d - np.clip(r - w, 0, None))
            e = h + np.append(w[1:] - (w + d)[:-1], 0.0)
            big_e = np.concatenate([[0.0], np.cumsum(e)[:-1]])
            v = served - big_e
            v[0] = max(w[0], served[0])
            u = big_e + np.maximum.accumulate(v)
            ooo[a:b] = u - np.concatenate([[w[0]], u[:-1] + e[:-1]]) + h
    return blocked, ooo


def test_hol_blocks_give_the_same_floats():
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(1, 300))
        ws = np.cumsum(rng.exponential(1e7, n)) + rng.uniform(0, 1e12)
        wd = rng.exponential(1e6, n) * (rng.random(n) < 0.7)
        ready = ws + rng.normal(0, 3e6, n)
        if trial % 3 == 0:
            ready[rng.random(n) < 0.05] = np.nan
        starts = np.unique(np.r_[0, rng.integers(0, n, 2)])
        whole = _hol_whole(starts, ws, wd, ready)
        for block in (1, 2, 7, 64, 1 << 16):
            for a, b in itertools.zip_longest(whole, hol_arrays(starts, ws, wd, ready, block=block)):
                assert a.tobytes() == b.tobytes(), (trial, block)
