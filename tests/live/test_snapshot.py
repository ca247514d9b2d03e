"""snapshot(): the live numbers against synthetic runs of known truth."""

from __future__ import annotations

import pytest

from lotus.live import LiveState, Tailer, snapshot
from lotus.live.state import FileInfo
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.live.conftest import MS, SEC, rec, write_known_run


def _snap(d, now, window_s=10.0):
    t = Tailer(d)
    t.poll()
    return snapshot(t.state, now, window_s)


def test_known_truth(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    write_known_run(tmp_path, t0)
    snap = _snap(tmp_path, t0 + 10 * SEC)
    assert snap["samples_per_s"] == pytest.approx(320)
    (ld,) = snap["loaders"]
    assert (ld["rank"], ld["loader"], ld["name"], ld["batch_size"], ld["num_workers"]) == (0, 0, "train", 32, 2)
    assert ld["samples_per_s"] == pytest.approx(320)
    assert ld["batches_per_s"] == pytest.approx(10)
    assert ld["wait_share"] == pytest.approx(0.2)
    assert ld["gpu_idle_share"] == pytest.approx(0.05)
    assert [w["worker"] for w in ld["workers"]] == [0, 1]
    for w in ld["workers"]:
        assert w["busy_share"] == pytest.approx(0.3)
        assert w["in_flight"] == 0
        assert w["batches_per_s"] == pytest.approx(5)
        assert w["mean_fetch_ms"] == pytest.approx(60)
    assert ld["queue_depth"] == 0 and ld["in_flight"] == 0
    op = ld["slowest_op"]
    assert op["name"] == "Resize" and op["mean_ms"] == pytest.approx(1) and op["calls"] == 3200
    assert [o["name"] for o in ld["ops"]] == ["Resize", "Normalize"]
    assert op["share_of_fetch"] == pytest.approx(3.2 / 6.0, abs=1e-4)
    assert snap["files"]["total"] == 3 and snap["files"]["open"] == 0


def test_window_is_the_last_seconds_only(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    write_known_run(tmp_path, t0)
    snap = _snap(tmp_path, t0 + 10 * SEC, window_s=2.0)  # (8 s, 10 s]: batches 80..99
    ld = snap["loaders"][0]
    assert ld["samples_per_s"] == pytest.approx(20 * 32 / 2)
    assert ld["wait_share"] == pytest.approx(0.2)
    later = _snap(tmp_path, t0 + 15 * SEC)  # 5 s of silence: half the batches of 10 s
    assert later["loaders"][0]["samples_per_s"] == pytest.approx(50 * 32 / 10)
    assert later["loaders"][0]["last_event_age_s"] == pytest.approx(5)


def test_young_loader_uses_the_time_since_its_first_event(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    write_known_run(tmp_path, t0, n_batches=30)  # 3 s of batches, window of 10 s
    ld = _snap(tmp_path, t0 + 3 * SEC)["loaders"][0]
    assert ld["window_s"] == pytest.approx(3.001)  # from the first event (a dispatch 1 ms before t0)
    assert ld["samples_per_s"] == pytest.approx(30 * 32 / 3.001, rel=1e-3)


def test_queue_depth_and_in_flight(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    main = TraceWriter(tmp_path, "main")
    main.define_loader(0, {"batch_size": 8, "num_workers": 2})
    w0 = TraceWriter(tmp_path, "worker", worker_id=0)
    w1 = TraceWriter(tmp_path, "worker", worker_id=1)
    rec(main, S.EV_EPOCH_START, t0, arg=2)
    for b in range(6):  # dispatched 0..5 round robin
        rec(main, S.EV_DISPATCH, t0 + b * MS, MS, batch=b, arg=b % 2)
    for b, w in ((0, w0), (1, w1), (2, w0)):  # prepared 0..2
        rec(w, S.EV_FETCH, t0 + 10 * MS * (b + 1), 10 * MS, batch=b)
    rec(main, S.EV_ARRIVE, t0 + 45 * MS, batch=0)
    rec(main, S.EV_CONSUMED, t0 + 50 * MS, batch=0)  # consumed 0
    for w in (main, w0, w1):
        w.flush()
    now = t0 + 100 * MS
    ld = _snap(tmp_path, now)["loaders"][0]
    assert ld["queue_depth"] == 2  # 1 and 2: prepared, not consumed
    assert ld["in_flight"] == 3  # 3, 4, 5
    by = {w["worker"]: w for w in ld["workers"]}
    assert by[0]["in_flight"] == 1 and by[1]["in_flight"] == 2  # 4 -> w0; 3, 5 -> w1
    # w0 busy: fetches 0 and 2 (20 ms), then batch 4 since fetch 2 ended at 40 ms: 60 ms more of 100 ms
    assert by[0]["busy_share"] == pytest.approx(0.8, abs=0.011)
    # samples from the loader's batch size (no collate, no sample events)
    assert ld["samples_per_s"] == pytest.approx(8 / 0.1)


def test_epoch_end_empties_the_queue(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    main = TraceWriter(tmp_path, "main")
    rec(main, S.EV_EPOCH_START, t0, arg=1)
    rec(main, S.EV_DISPATCH, t0, MS, batch=0, arg=0)
    rec(main, S.EV_DISPATCH, t0, MS, batch=1, arg=0)
    rec(main, S.EV_EPOCH_END, t0 + 5 * MS)
    main.flush()
    ld = _snap(tmp_path, t0 + 10 * MS)["loaders"][0]
    assert ld["epoch_done"] and ld["in_flight"] == 0 and ld["queue_depth"] == 0


def test_sample_counts_when_no_collate_and_no_batch_size(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    main = TraceWriter(tmp_path, "main")  # num_workers=0: the main process writes everything
    main.define_loader(0, {"batch_size": None, "num_workers": 0})
    for b in range(10):
        s = t0 + b * 100 * MS
        rec(main, S.EV_FETCH, s, 50 * MS, batch=b)
        for j in range(b % 3 + 1):  # 1, 2, 3, 1, 2, 3, ... samples
            rec(main, S.EV_SAMPLE, s + j * MS, MS, batch=b, sample=j)
        rec(main, S.EV_CONSUMED, s + 60 * MS, batch=b)
    main.flush()
    ld = _snap(tmp_path, t0 + SEC)["loaders"][0]
    assert ld["samples_per_s"] == pytest.approx(19 / 1.0)
    assert [w["worker"] for w in ld["workers"]] == [-1]
    assert ld["workers"][0]["busy_share"] == pytest.approx(0.5)
    assert ld["gpu_idle_share"] is None


def test_unknown_sizes_give_null_samples_but_batches(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    main = TraceWriter(tmp_path, "main")
    rec(main, S.EV_EPOCH_START, t0)
    rec(main, S.EV_CONSUMED, t0 + 500 * MS, batch=0)
    main.flush()
    ld = _snap(tmp_path, t0 + SEC)["loaders"][0]
    assert ld["samples_per_s"] is None and ld["batches_per_s"] == pytest.approx(1.0)


def test_empty_state():
    snap = snapshot(LiveState(), 0)
    assert snap["samples_per_s"] == 0 and snap["loaders"] == [] and snap["files"]["total"] == 0


def test_state_retention_bounds_memory(now_mono):
    import numpy as np

    st = LiveState(retention_ns=5 * SEC)
    info = FileInfo("f", "main", 0, -1, 1, "b", True)
    dt = np.dtype(S.RECORD_DTYPE)
    for sec in range(60):  # one minute of 100 consumed batches per second
        ev = np.zeros(100, dt)
        ev["name_id"] = S.EV_CONSUMED
        ev["start_ns"] = now_mono + sec * SEC + np.arange(100) * 10 * MS
        ev["batch_id"] = np.arange(100) + sec * 100
        st.ingest(info, ev, 0, {})
        st.commit()
    assert len(st.rows) <= 700  # 5 s + the part of a second being filled
    snap = snapshot(st, now_mono + 60 * SEC - 10 * MS, window_s=5.0)
    assert snap["loaders"][0]["batches_per_s"] == pytest.approx(100)


def test_ranks_are_separate_loaders_and_add_up(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    for rank, per_s in ((0, 10), (1, 20)):
        w = TraceWriter(tmp_path, "main", rank=rank, world_size=2)
        w.define_loader(0, {"name": f"rank{rank}", "batch_size": 4})
        rec(w, S.EV_EPOCH_START, t0)
        for b in range(per_s):
            rec(w, S.EV_CONSUMED, t0 + (b + 1) * SEC // per_s, batch=b)
        w.close()
    snap = _snap(tmp_path, t0 + SEC)
    assert [(ld["rank"], ld["name"], ld["samples_per_s"]) for ld in snap["loaders"]] == [
        (0, "rank0", 40.0), (1, "rank1", 80.0)]
    assert snap["samples_per_s"] == 120.0


def test_two_processes_of_one_rank_keep_their_loaders_apart(tmp_path, now_mono):
    # e.g. a job that runs its evaluation in a subprocess: both processes have a loader 0, as in the readers
    # (lotus.trace.events.loader_offsets) the second process's loaders become 1000 + id, its workers' too
    t0 = now_mono - 20 * SEC
    for pid, name, per_s in ((4001, "train", 10), (4002, "eval", 20)):
        w = TraceWriter(tmp_path, "main", extra={"pid": pid})
        w.define_loader(0, {"name": name, "batch_size": 4})
        rec(w, S.EV_EPOCH_START, t0)
        for b in range(per_s):
            rec(w, S.EV_CONSUMED, t0 + (b + 1) * SEC // per_s, batch=b)
        w.close()
        worker = TraceWriter(tmp_path, "worker", worker_id=0, extra={"pid": pid + 100, "main_pid": pid})
        rec(worker, S.EV_FETCH, t0, SEC // 2, batch=0)
        worker.close()
    snap = _snap(tmp_path, t0 + SEC)
    got = sorted((ld["loader"], ld["name"], ld["samples_per_s"]) for ld in snap["loaders"])
    assert got == [(0, "train", 40.0), (1000, "eval", 80.0)]
    busy = {ld["loader"]: [w["worker"] for w in ld.get("workers", [])] for ld in snap["loaders"]}
    assert busy == {0: [0], 1000: [0]}
