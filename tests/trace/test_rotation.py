"""File rotation by size/time, compressed parts, and readers stitching parts (missing parts warned)."""

from __future__ import annotations

import logging
import time

import pandas as pd
import pytest

from lotus.trace import schema as S
from lotus.trace.events import load_events
from lotus.trace.writer import TraceWriter, compress_part

COLS = ["name", "start_ns", "dur_ns", "batch_id", "sample", "arg"]


def write(d, *, rotate_bytes=None, batches=40):
    w = TraceWriter(d, "worker", worker_id=0, rotate_bytes=rotate_bytes)
    t = 10**12  # the same events in every call
    for b in range(batches):
        op = w.name_id(f"Op{b // 10}")  # a new op name every 10 batches: definitions made between parts
        w.buf += w.pack(S.EV_FETCH, 0, 0, t + b * 1000, 900, b, -1, 0)
        for s in range(4):
            w.buf += w.pack(op, 0, 0, t + b * 1000 + s * 10, 5 + s, b, b * 4 + s, 0)
        w.flush()  # a worker flushes after every batch it puts
    w.close()
    return w


def frame(d):
    ev = load_events(d)
    ev = ev.assign(start_ns=ev["start_ns"] - ev["start_ns"].min())  # two writers' anchors differ by ns
    return ev[COLS].astype({"name": str}).sort_values(["start_ns", "name"], ignore_index=True), ev


def test_parts_read_as_one_file(tmp_path):
    write(tmp_path / "one")
    w = write(tmp_path / "rot", rotate_bytes=2048)
    parts = sorted(p.name for p in (tmp_path / "rot").iterdir())
    assert len(parts) >= 5 and parts[1].endswith(".part0001.lotustrace") and w._part == len(parts) - 1
    a, _ = frame(tmp_path / "one")
    b, ev = frame(tmp_path / "rot")
    pd.testing.assert_frame_equal(a, b)
    files = ev.attrs["files"]
    assert [f["clean_close"] for f in files] == [None] * (len(files) - 1) + [True]


def test_compressed_parts(tmp_path):
    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    for p in sorted(d.iterdir())[:-1]:
        assert compress_part(p).name.endswith(".lotustrace.zst")
    assert not list(d.glob("*.tmp"))
    a, _ = frame(tmp_path / "rot")
    write(tmp_path / "one")
    pd.testing.assert_frame_equal(frame(tmp_path / "one")[0], a)
    zst = sum(p.stat().st_size for p in d.glob("*.zst"))
    assert zst < 0.5 * len(list(d.glob("*.zst"))) * 2048  # compression happened


def test_background_compression(tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_COMPRESS_PARTS", "1")
    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    deadline = time.time() + 30
    while len(list(d.glob("*.lotustrace"))) > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert len(list(d.glob("*.lotustrace"))) == 1 and len(list(d.glob("*.zst"))) > 3
    assert len(frame(d)[0]) == 40 * 5


def test_missing_middle_part_warns_with_the_gap(tmp_path, caplog):
    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    gone = sorted(d.glob("*.part0002.lotustrace"))[0]
    gone.unlink()
    with caplog.at_level(logging.WARNING, logger="lotus.trace"):
        a, _ = frame(d)
    msg = [r.getMessage() for r in caplog.records if "of the trace missing" in r.getMessage()]
    assert len(msg) == 1 and "part 2 of the trace missing" in msg[0] and " UTC to " in msg[0], msg
    assert 0 < len(a) < 40 * 5


@pytest.mark.parametrize("engine", ["memory", "scan"])
def test_analysis_over_parts(tmp_path, monkeypatch, engine):
    from lotus.analysis.runs import load_config

    write(tmp_path / "rot", rotate_bytes=2048)
    monkeypatch.setenv("LOTUS_ENGINE", engine)
    cfg = load_config(tmp_path / "rot", engine="auto")
    assert len(cfg.batches) == 40


def _items(d, *, rotate_bytes=None, items=30):
    """Items whose op records and sample record are split by a flush (and so, rotating, by a part) now
    and then: the derived transform span needs the ops of the previous part (format >= 2)."""
    w = TraceWriter(d, "worker", worker_id=0, rotate_bytes=rotate_bytes)
    op = w.name_id("Op")
    t = 10**12
    for i in range(items):
        b, s, t0 = i // 4, i, t + i * 1000
        for k in range(3):
            w.buf += w.pack(op, 0, 0, t0 + 100 + k * 200, 150, b, s, 0)
        if i % 3 == 1:
            w.flush()  # the item's ops in one part, its sample record in the next
        w.buf += w.pack(S.EV_SAMPLE, 0, 0, t0, 800, b, s, 100)  # load: 100 ns, then the ops
        w.flush()
    w.close()


def test_derived_spans_across_parts(tmp_path, monkeypatch):
    _items(tmp_path / "one")
    _items(tmp_path / "rot", rotate_bytes=64)
    assert len(list((tmp_path / "rot").iterdir())) > 20
    a, _ = frame(tmp_path / "one")
    b, ev = frame(tmp_path / "rot")
    pd.testing.assert_frame_equal(a, b)
    tf = ev[ev["name"] == "transform"]
    assert len(tf) == 30 and (tf["dur_ns"] == 550).all()  # the load's end to the last op's end
    monkeypatch.setenv("LOTUS_ENGINE", "scan")  # the scan engine derives them alike
    from lotus.analysis.runs import load_config

    ops = load_config(tmp_path / "rot", engine="auto").events.attrs["op_engine"].op_table()
    assert ops["transform"]["min_ns"] == ops["transform"]["max_ns"] == 550
