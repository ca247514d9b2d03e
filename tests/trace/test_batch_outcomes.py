"""Batches are batches: exhausted fetches and dispatch-only keys are no rows, failed batches are marked,
and legacy FETCH_STOP fetches are read as `exhausted` events."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.query import batches_from_events, fetch_outcomes, load_batches, ok_batches, outcome_summary
from lotus.trace import load_events
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.trace.outcome_run import EXHAUSTED, FAILED, OK_FETCH_MS, write_outcome_run


@pytest.fixture(params=[False, True], ids=["current", "legacy"])
def outcome_run(request, tmp_path):
    return write_outcome_run(tmp_path / "run", legacy=request.param)


def test_only_fetched_or_consumed_keys_are_rows(outcome_run):
    b = load_batches(outcome_run)
    keys = sorted(zip(b["epoch"], b["batch_id"], strict=True))
    assert keys == sorted([*OK_FETCH_MS, FAILED[0]])  # 6 ok + 1 failed; no exhausted, no dispatch-only
    assert b["status"].astype(str).tolist() == ["failed" if k == FAILED[0] else "ok" for k in keys]
    assert b["failed"].tolist() == [k == FAILED[0] for k in keys]
    assert b.attrs["exhausted"] == 2
    assert b.attrs["exhausted_by_worker"] == {"r0/w0": 1, "r0/w1": 1}
    assert b.attrs["dispatched_without_batch"] == 2
    ok = ok_batches(b)
    assert len(ok) == 6 and (ok["prep_dur_ns"] // 1_000_000).tolist() == [10, 12, 14, 16, 18, 20]


def test_outcome_summary_counts_and_places(outcome_run):
    o = outcome_summary(load_batches(outcome_run))
    assert o == {"batches": 7, "ok": 6, "failed": 1, "failed_by_worker": {"r0/w1": 1}, "exhausted": 2,
                 "exhausted_by_worker": {"r0/w0": 1, "r0/w1": 1}, "dispatched_without_batch": 2}


def test_fetch_outcomes_lists_exhausted_and_failed(outcome_run):
    t = fetch_outcomes(load_events(outcome_run))
    got = sorted(zip(t["epoch"], t["batch_id"], t["worker_id"], t["outcome"], t["dur_ns"] // 1_000_000, strict=True))
    assert got == [(0, 4, 0, "exhausted", 200), (0, 5, 1, "exhausted", 200), (1, 2, 1, "failed", 500)]
    assert set(t["pid"]) == {7001, 7002}


def test_legacy_fetch_stop_is_read_as_exhausted(tmp_path, caplog):
    """A file of lotus <= 0.1: the exhausted fetch is a `fetch` with FETCH_STOP (written directly)."""
    w = TraceWriter(tmp_path, "worker", worker_id=1)
    w.buf += w.pack(S.EV_FETCH, 0, 0, 1_000, 400, 3, -1, 0)
    w.buf += w.pack(S.EV_FETCH, 0, 0, 2_000, 300, 5, -1, S.FETCH_STOP)
    w.buf += w.pack(S.EV_FETCH, 0, 0, 3_000, 200, 7, -1, S.FETCH_ERROR)
    w.close()
    with caplog.at_level("INFO", logger="lotus.trace"):
        ev = load_events(w.path)
    assert ev["name"].astype(str).tolist() == ["fetch", "exhausted", "fetch"]
    assert ev["cat"].astype(str).tolist() == ["batch", "marker", "batch"]
    assert ev["arg"].tolist() == [0, 0, S.FETCH_ERROR]  # the legacy bit is cleared
    assert ev["dur_ns"].tolist() == [400, 300, 200]
    assert "FETCH_STOP" in caplog.text
    b = batches_from_events(ev)
    assert b["batch_id"].tolist() == [3, 7] and b["failed"].tolist() == [False, True]
    assert b.attrs["exhausted"] == 1


def test_legacy_and_current_files_give_the_same_frames(tmp_path):
    cur = load_events(write_outcome_run(tmp_path / "cur"))
    old = load_events(write_outcome_run(tmp_path / "old", legacy=True))
    for col in ("name", "batch_id", "dur_ns", "worker_id"):
        a = cur.loc[cur["name"] != "arrive", col].astype(str if col == "name" else "int64")
        b = old.loc[old["name"] != "arrive", col].astype(str if col == "name" else "int64")
        assert a.tolist() == b.tolist()
    bc, bo = batches_from_events(cur), batches_from_events(old)
    assert bc["batch_id"].tolist() == bo["batch_id"].tolist() and bc.attrs["exhausted"] == bo.attrs["exhausted"]


def test_flagged_arrive_alone_marks_a_key_exhausted(tmp_path):
    """The worker's file is lost: the main process's flagged arrive still says it was no batch."""
    ev = load_events(write_outcome_run(tmp_path))
    assert ((ev["name"] == "arrive") & (ev["arg"] == S.ARRIVE_EXHAUSTED)).sum() == 2
    main_only = ev[ev["role"] == "main"].reset_index(drop=True)
    main_only.attrs = dict(ev.attrs)
    b = batches_from_events(main_only)
    assert sorted(zip(b["epoch"], b["batch_id"], strict=True)) == sorted(OK_FETCH_MS)  # consumed keys only
    assert b.attrs["exhausted"] == len(EXHAUSTED)
    assert b.attrs["exhausted_by_worker"] == {"r0/w0": 1, "r0/w1": 1}  # from the dispatch
    assert b.attrs["dispatched_without_batch"] == 3  # the 2 past the end + the failed batch (no fetch now)


def test_dispatch_only_keys_of_num_workers_0_are_not_rows(tmp_path):
    """num_workers=0: the index whose fetch found the end has a dispatch and nothing else."""
    w = TraceWriter(tmp_path, "main")
    for b in range(3):
        w.buf += w.pack(S.EV_DISPATCH, 0, 0, 1_000 * b, 10, b, -1, -1)
    for b in range(2):
        w.buf += w.pack(S.EV_FETCH, 0, 0, 1_000 * b + 20, 500, b, -1, 0)
        w.buf += w.pack(S.EV_CONSUMED, 0, 0, 1_000 * b + 600, 0, b, -1, 0)
    w.close()
    b = load_batches(tmp_path)
    assert b["batch_id"].tolist() == [0, 1]
    assert b.attrs["dispatched_without_batch"] == 1 and b.attrs["exhausted"] == 0
    assert (b["worker_id"] == -1).all()


def test_empty_events_give_empty_batches_with_outcome_attrs():
    from lotus.trace.events import EVENT_COLUMNS

    ev = pd.DataFrame({c: pd.Series(dtype="int64") for c in EVENT_COLUMNS})
    ev["name"] = pd.Categorical([], categories=["fetch"])
    ev["cat"] = pd.Categorical([], categories=["batch"])
    b = batches_from_events(ev)
    assert len(b) == 0 and "status" in b and outcome_summary(b)["exhausted"] == 0
    assert np.asarray(b["failed"]).dtype == bool


@pytest.mark.timeout(120)
def test_loaders_of_independent_processes_are_told_apart(tmp_path):
    """Two processes of one rank (e.g. subprocesses of one job) both have a loader 0: the reader keeps them apart."""
    import subprocess
    import sys

    code = ("import sys; from lotus.dataloader import DataLoader; from tests.dataloader.datasets import MapDS\n"
            "list(DataLoader(MapDS(n=16), batch_size=4, num_workers=1, trace_dir=sys.argv[1]))\n")
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=100)
    from lotus.query import load_batches

    b = load_batches(tmp_path)
    assert sorted(b["loader"].unique()) == [0, 1000]
    assert len(b) == 8 and b["prep_dur_ns"].notna().all() and b["consumed_ns"].notna().all()
