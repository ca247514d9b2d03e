"""The trace writer: round trip, definitions, bounds, failures, fork safety."""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

from lotus._warn import LotusTraceWarning, reset_for_tests
from lotus.trace import load_events
from lotus.trace import schema as S
from lotus.trace.native import read_trace_file
from lotus.trace.writer import TraceWriter


def _write(w: TraceWriter, name_id, start, dur=10, batch=0, sample=-1, arg=0, loader=0, epoch=0):
    w.buf += w.pack(name_id, loader, epoch, start, dur, batch, sample, arg)


def test_roundtrip_with_long_names_and_loader_description(tmp_path):
    w = TraceWriter(tmp_path, "worker", rank=3, worker_id=2)
    long = "AVeryLongTransformNameThatNeedsMoreThanFortyBytes_" * 2
    a, b = w.name_id("RandomResizedCrop"), w.name_id(long)
    assert (a, b) == (S.FIRST_DYNAMIC_ID, S.FIRST_DYNAMIC_ID + 1)
    assert w.name_id("RandomResizedCrop") == a
    w.define_loader(0, {"batch_size": 64, "name": "train"})
    _write(w, a, 100, sample=5)
    _write(w, b, 200, sample=6)
    _write(w, S.EV_FETCH, 50, dur=400, batch=7)
    w.close()
    tf = read_trace_file(w.path)
    assert tf.clean_close and tf.header["rank"] == 3 and tf.header["worker_id"] == 2
    assert tf.names == {a: "RandomResizedCrop", b: long}
    assert tf.loaders == {0: {"batch_size": 64, "name": "train"}}
    assert list(tf.records["name_id"]) == [a, b, S.EV_FETCH]
    ev = load_events(w.path)
    assert list(ev["name"].astype(str)) == ["RandomResizedCrop", long, "fetch"]
    assert list(ev["cat"].astype(str)) == ["op", "op", "batch"]
    offset = tf.header["anchor_wall_ns"] - tf.header["anchor_mono_ns"]
    assert list(ev["start_ns"]) == [100 + offset, 200 + offset, 50 + offset]
    assert ev["worker_id"].unique().tolist() == [2] and ev["rank"].unique().tolist() == [3]


def test_anchor_is_consistent_with_clocks(tmp_path):
    w = TraceWriter(tmp_path, "main")
    w.close()
    h = read_trace_file(w.path).header
    now_offset = time.time_ns() - time.monotonic_ns()
    assert abs((h["anchor_wall_ns"] - h["anchor_mono_ns"]) - now_offset) < 50_000_000  # same clocks, < 50 ms drift


def test_truncated_last_record_is_dropped_with_a_warning(tmp_path, caplog):
    w = TraceWriter(tmp_path, "worker", worker_id=0)
    for i in range(5):
        _write(w, S.EV_SAMPLE, i * 10, sample=i)
    w.flush()
    w._file.close()
    with open(w.path, "ab") as f:
        f.write(b"\x07\x00" * 7)  # a crash mid-record
    ev = load_events(w.path)
    assert (ev["name"] == "sample").sum() == 5  # (each with its derived `load`: format version 2)
    assert "truncated" in caplog.text


def test_unwritable_directory_warns_once_and_drops(tmp_path):
    reset_for_tests()
    (tmp_path / "file").write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = TraceWriter(tmp_path / "file", "main")
        w2 = TraceWriter(tmp_path / "file", "main")
    assert not w.ok and not w2.ok
    assert sum(issubclass(c.category, LotusTraceWarning) for c in caught) == 1
    _write(w, S.EV_WAIT, 1)
    w.flush()
    assert len(w.buf) == 0
    w.close()


def test_flush_bound_and_interval(tmp_path):
    w = TraceWriter(tmp_path, "main", flush_bytes=S.RECORD_SIZE * 10)
    size0 = os.path.getsize(w.path)
    for i in range(9):
        _write(w, S.EV_WAIT, i)
        w.maybe_flush()
    assert os.path.getsize(w.path) == size0  # under the bound, less than a second
    _write(w, S.EV_WAIT, 9)
    w.maybe_flush()
    assert os.path.getsize(w.path) == size0 + 10 * S.RECORD_SIZE
    _write(w, S.EV_WAIT, 10)
    w.maybe_flush(now_ns=time.monotonic_ns() + 2_000_000_000)  # a second later
    assert os.path.getsize(w.path) == size0 + 11 * S.RECORD_SIZE
    w.close()


@pytest.mark.timeout(30)
def test_forked_child_never_writes_the_parents_buffer(tmp_path):
    from lotus.trace.writer import main_writer

    w = main_writer(tmp_path)
    _write(w, S.EV_WAIT, 1)
    pid = os.fork()
    if pid == 0:  # child: a normal exit runs atexit handlers, which must not flush the parent's records
        w.flush()
        w.close()
        os._exit(0)
    os.waitpid(pid, 0)
    w.flush()
    recs = read_trace_file(w.path).records
    assert len(recs) == 1
    w.close()


def test_records_are_48_bytes_little_endian():
    raw = S.RECORD.pack(7, 1, 2, 3, 4, 5, 6, 8)
    arr = np.frombuffer(raw, dtype=np.dtype(S.RECORD_DTYPE))
    assert S.RECORD_SIZE == 48 and arr["name_id"][0] == 7 and arr["arg"][0] == 8


def test_missing_rank_is_named_and_the_others_analysed(tmp_path, caplog):
    for rank in (0, 2):  # rank 1 of 3 lost its files
        w = TraceWriter(tmp_path, "main", rank=rank, world_size=3)
        _write(w, S.EV_WAIT, 10, dur=5, batch=0)
        _write(w, S.EV_CONSUMED, 15, dur=0, batch=0)
        w.close()
    ev = load_events(tmp_path)
    assert "no trace files of rank(s) 1 (world size 3); analysing ranks 0, 2" in caplog.text
    assert sorted(ev["rank"].unique()) == [0, 2]


def test_writers_pack_the_records_bytes():
    """PACK/PACK2/PACK3 (native 'l' where it gives the same bytes, faster for multi-digit ints) write
    exactly RECORD's layout, extremes included; out of range still raises like RECORD."""
    import struct

    import pytest

    from lotus.trace import schema as S

    rows = [(-32768, 32767, -(2**31), 2**63 - 1, -(2**63), 0, -1, 1),
            (5, 0, 3, 1_700_000_000_123_456_789, 12, 7, -1, 4)]
    for r in rows:
        assert S.PACK(*r) == S.RECORD.pack(*r)
    assert S.PACK2(*rows[0], *rows[1]) == S.RECORD.pack(*rows[0]) + S.RECORD.pack(*rows[1])
    assert S.PACK3(*rows[1], *rows[0], *rows[1]) == b"".join(S.RECORD.pack(*r) for r in (rows[1], rows[0], rows[1]))
    with pytest.raises(struct.error):
        S.PACK(0, 0, 0, 2**63, 0, 0, 0, 0)
