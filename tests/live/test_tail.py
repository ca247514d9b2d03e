"""The tailer: incremental reads of files being written (partial records, late definitions, new files)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from lotus.live import Tailer, snapshot
from lotus.live import tail as tail_mod
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.live.conftest import MS, SEC, rec


def test_reads_only_whole_records_and_only_new_ones(tmp_path, now_mono):
    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "train", "batch_size": 4})
    for b in range(3):
        rec(w, S.EV_CONSUMED, now_mono + b * MS, batch=b)
    w.flush()
    t = Tailer(tmp_path)
    assert t.poll() == 3
    header_and_first = t.bytes_read
    assert t.state.loaders[(0, 0)]["name"] == "train"
    assert t.poll() == 0 and t.bytes_read == header_and_first  # nothing new: nothing read

    raw = w.pack(S.EV_CONSUMED, 0, 0, now_mono + 5 * MS, 0, 3, -1, 0)
    with open(w.path, "ab") as f:  # a record torn in the middle of its write
        f.write(raw[:20])
    assert t.poll() == 0
    assert len(t.state.rows) == 3
    with open(w.path, "ab") as f:
        f.write(raw[20:])
    assert t.poll() == 1
    assert t.bytes_read == header_and_first + S.RECORD_SIZE
    assert sorted(t.state.rows["batch"].tolist()) == [0, 1, 2, 3]


def test_definitions_in_the_middle_and_a_second_file(tmp_path, now_mono):
    main = TraceWriter(tmp_path, "main")
    rec(main, S.EV_EPOCH_START, now_mono)
    main.flush()
    t = Tailer(tmp_path)
    t.poll()
    assert (0, 0) not in t.state.loaders  # not described yet
    main.define_loader(0, {"name": "late", "num_workers": 1})
    main.flush()
    t.poll()
    assert t.state.loaders[(0, 0)]["name"] == "late"

    w = TraceWriter(tmp_path, "worker", worker_id=0)  # a worker starting later
    rec(w, S.EV_FETCH, now_mono, 5 * MS, batch=0)
    w.flush()
    assert t.poll() == 1
    assert len(t.tails) == 2
    op = w.name_id("RandomResizedCrop")  # defined mid-file, right before its first use
    for i in range(4):
        rec(w, op, now_mono + i * MS, MS, batch=0, sample=i)
    long = "ALongOpNameThatTakesMoreThanFortyBytesToWrite" * 2
    op2 = w.name_id(long)
    rec(w, op2, now_mono, 2 * MS, batch=0, sample=0)
    fake = w.name_id("fetch")  # a user op named like a built-in event
    rec(w, fake, now_mono, MS, batch=0, sample=0)
    w.flush()
    t.poll()
    names = {name for (_, _, name) in t.state.ops}
    assert names == {"RandomResizedCrop", long, "fetch (op)"}
    assert t.state.ops[(0, 0, "RandomResizedCrop")][(now_mono // SEC)][1] >= 1


def test_end_record_closes_the_file(tmp_path, now_mono):
    w = TraceWriter(tmp_path, "worker", worker_id=0)
    rec(w, S.EV_FETCH, now_mono, MS, batch=0)
    w.close()
    t = Tailer(tmp_path)
    t.poll()
    info = t.state.files[w.path.name]
    assert info.ended and info.records == 1
    with open(w.path, "ab") as f:  # never read again (nothing follows an end record anyway)
        f.write(w.pack(S.EV_FETCH, 0, 0, now_mono, MS, 1, -1, 0))
    assert t.poll() == 0


def test_not_a_trace_and_a_header_being_written(tmp_path, caplog):
    (tmp_path / "junk.lotustrace").write_bytes(b"NOTLOTUS" + b"\0" * 100)
    half = tmp_path / "lotus-r0-main-p1.lotustrace"
    half.write_bytes(S.MAGIC)  # preamble not complete yet
    t = Tailer(tmp_path)
    assert t.poll() == 0
    assert "junk.lotustrace" in caplog.text and "p1" not in caplog.text
    assert t.tails == {}


def test_huge_backlog_is_skipped_to_the_horizon(tmp_path, now_mono, monkeypatch):
    """A long job: only the last minute is read, op names and loader descriptions still resolve."""
    monkeypatch.setattr(tail_mod, "SKIP_BYTES", 1 << 16)
    monkeypatch.setattr(tail_mod, "SCAN_RECORDS", 1000)
    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "big", "batch_size": 2, "num_workers": 0})
    op = w.name_id("Decode")
    n = 200_000  # one hour of events, 55 per second
    dt = np.dtype(S.RECORD_DTYPE)
    ev = np.zeros(n, dt)
    ev["name_id"] = np.where(np.arange(n) % 2 == 0, S.EV_CONSUMED, op)
    ev["start_ns"] = now_mono - 3600 * SEC + np.arange(n) * (3600 * SEC // n)
    ev["dur_ns"] = np.where(ev["name_id"] == op, MS, 0)
    ev["batch_id"] = np.arange(n)
    ev["sample"] = -1
    w.buf += ev.tobytes()
    w.flush()
    t = Tailer(tmp_path)
    t0 = time.perf_counter()
    t.poll()
    elapsed = time.perf_counter() - t0
    size = w.path.stat().st_size
    assert t.bytes_read < size / 20  # ~62 s of 3600 s, plus the chunk scanned for definitions
    assert t.state.loaders[(0, 0)]["name"] == "big"
    assert {name for (_, _, name) in t.state.ops} == {"Decode"}
    snap = snapshot(t.state, now_mono)
    rate = 0.5 * n / 3600 * 2  # consumed batches per second x 2 samples
    assert snap["loaders"][0]["samples_per_s"] == pytest.approx(rate, rel=0.05)
    assert elapsed < 1.0
    # appended later: read incrementally from where the tail stopped
    before = t.bytes_read
    rec(w, S.EV_CONSUMED, now_mono + MS, batch=n)
    w.flush()
    assert t.poll() == 1 and t.bytes_read == before + S.RECORD_SIZE


def test_file_of_another_host_is_shifted_through_its_anchors(tmp_path, now_mono):
    w = TraceWriter(tmp_path, "main", extra={"boot_id": "other-host", "anchor_mono_ns": 5 * SEC,
                                             "anchor_wall_ns": time.time_ns()})
    rec(w, S.EV_CONSUMED, 6 * SEC, batch=0)  # 1 s after that host's anchor
    w.flush()
    t = Tailer(tmp_path)
    t.poll()
    info = t.state.files[w.path.name]
    assert not info.local and not t.state.has_local_files
    assert t.state.rows["start"][0] == pytest.approx(now_mono + SEC, abs=0.2 * SEC)
    assert t.state.now_ns(live=True) == t.state.latest_ns  # other host: now = the latest event seen


def test_a_packed_batch_is_read_with_its_loop_record(tmp_path, now_mono):
    """Format 3 (num_workers=0): a batch record and its loop record are read together, expanded."""
    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "train", "batch_size": 4})
    w.flush()
    t = Tailer(tmp_path)
    t.poll()
    d0 = now_mono
    pair = S.PACK2(S.EV_MAIN_BATCH, 0, 1, d0, 3 * MS, 0, MS, 2 * MS,
                   S.EV_MAIN_LOOP, 0, 1, d0 - MS, 4 * MS, S.NO_ID, 0, 5 << S.MAIN_ITEMS_SHIFT)
    with open(w.path, "ab") as f:  # the batch record alone so far
        f.write(pair[:S.RECORD_SIZE])
    assert t.poll() == 0
    with open(w.path, "ab") as f:
        f.write(pair[S.RECORD_SIZE:])
    assert t.poll() == 5  # dispatch, collate, fetch, wait, consumed
    assert t.state.rows["batch"].tolist().count(0) >= 1
