"""The scan engine folds batch-level events into per-batch columns (lotus.query.batchparts): the same
batches, waits and verdicts as the in-memory path; sparse or huge batch ids fall back to keeping the
events as rows; duplicates warn as before; the run's time span is unchanged."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from lotus.analysis.runs import load_config
from lotus.analysis.window import parse_window, run_span
from lotus.query.batches import BATCH_COLUMNS
from lotus.query.batchparts import BatchParts, SparseBatchIds
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.analysis.test_gpu import write_gpu_run
from tests.trace.outcome_run import write_outcome_run
from tests.trace.test_scan import compare, native_from_events, same_from_table

SPEC = PipelineSpec(n_batches=20, batch_size=4, n_workers=3, epochs=3, seed=7)


def _scan(run, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    return load_config(run, engine="auto")


def _folded(cfg) -> bool:
    """Whether the scan folded the batch-level events (no wait row left) rather than keeping them."""
    return not (cfg.events["name"] == "wait").any()


def _with_batch_ids(run, tmp_path, name, f):
    """The run rewritten with batch ids ``f(epoch, batch_id)`` (every event of a batch alike)."""
    ev = load_events(run)
    has = ev["batch_id"].to_numpy() >= 0
    ids = ev["batch_id"].to_numpy().copy()
    ids[has] = f(ev["epoch"].to_numpy()[has].astype(np.int64), ids[has])
    ev["batch_id"] = ids
    return native_from_events(ev, tmp_path / name)


@pytest.fixture
def synth(tmp_path):
    write_native(tmp_path / "synth", SPEC)
    return tmp_path / "synth"


def test_folded_batches_identical(synth, monkeypatch):
    compare(synth, monkeypatch, outliers=True)
    assert _folded(_scan(synth, monkeypatch))


def test_sparse_ids_still_folded(synth, tmp_path, monkeypatch):
    run = _with_batch_ids(synth, tmp_path, "sparse", lambda e, b: b * 997 + e)
    compare(run, monkeypatch, outliers=True)
    assert _folded(_scan(run, monkeypatch))


def test_huge_ids_fall_back_to_event_rows(synth, tmp_path, monkeypatch, caplog):
    run = _with_batch_ids(synth, tmp_path, "huge", lambda e, b: np.where(e == 1, b + (1 << 40), b))
    with caplog.at_level(logging.INFO, logger="lotus.trace"):
        compare(run, monkeypatch, outliers=True)
    assert "too sparse to fold" in caplog.text
    cfg = _scan(run, monkeypatch)
    assert not _folded(cfg) and cfg.batches["batch_id"].max() == 19 + (1 << 40)


def test_guard_refuses_before_allocating():
    parts = BatchParts("x")
    one = np.ones(1, np.int64)
    with pytest.raises(SparseBatchIds):
        parts.add(0, np.array([3]), one << 40, 0 * one, 0 * one, {"worker_id": 0, "pid": 1, "start_ns": one,
                                                                  "dur_ns": one, "arg": one})
    assert parts.slots == 0


def test_duplicates_warn_as_in_memory(synth, tmp_path, monkeypatch, caplog):
    run = tmp_path / "dup"
    shutil.copytree(synth, run)
    worker = sorted(run.glob("*-w0-*"))[0]
    shutil.copy(worker, run / "lotus-r0-w0-p99999.lotustrace")  # every event of worker 0 twice
    warnings = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lotus.trace"):
            load_config(run, engine="auto")
        warnings[engine] = sorted(r.getMessage() for r in caplog.records if "duplicate" in r.getMessage())
    assert warnings["scan"] == warnings["memory"] and any("'fetch'" in w for w in warnings["scan"])
    compare(run, monkeypatch)


def test_run_span_unchanged_by_folding(synth, tmp_path, monkeypatch):
    ev = load_events(synth)  # without markers: a dispatch is the first event, a step the last
    run = native_from_events(ev[(ev["cat"] != "marker").to_numpy()], tmp_path / "nomarkers")
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    mem = load_config(run, engine="auto")
    scan = _scan(run, monkeypatch)
    assert _folded(scan)
    assert run_span(scan.events) == run_span(mem.events)
    for window in ("e0", "e1", "e1:e2", "e2", "0.01:0.02"):
        assert parse_window(window, scan.events) == parse_window(window, mem.events), window
    # the rows kept alone would not give it: the folded events' extent is what makes it equal
    extent = scan.events.attrs["op_engine"].folded_extent
    scan.events.attrs["op_engine"].folded_extent = {}


    def rows_only(epochs):
        try:
            return run_span(scan.events, epochs)
        except ValueError:  # no row left at all
            return None

    try:
        assert any(rows_only(e) != run_span(mem.events, e) for e in (None, (0, 0), (1, 1), (2, 2)))
    finally:
        scan.events.attrs["op_engine"].folded_extent = extent


@pytest.mark.parametrize("kind", ["synth", "outcome", "gpu"])
def test_table_columns_are_the_frames(kind, synth, tmp_path, monkeypatch):
    """Every column the compact table derives equals the batches DataFrame's; the summaries too."""
    if kind == "gpu":
        write_gpu_run(tmp_path / "g", ranks=(0, 1))
    run = {"synth": synth, "outcome": write_outcome_run(tmp_path / "o"), "gpu": tmp_path / "g"}[kind]
    cfg = _scan(run, monkeypatch)
    t, f = cfg.table, cfg.batches
    assert t is not None and len(t) == len(f) and t.attrs["exhausted"] == f.attrs["exhausted"]
    for c in BATCH_COLUMNS:
        if c in ("n_samples", "status", "detail"):
            continue
        v, ok = t.values(c)
        s = f[c]
        assert (s.notna().to_numpy() == ok).all(), c
        assert (v[ok] == s[ok].astype("int64").to_numpy()).all(), c
    same_from_table(cfg, outliers=True)
    assert t.nbytes < 120 * len(t) + 1000  # compact: well under the DataFrame's ~250 bytes a batch
