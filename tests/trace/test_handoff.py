"""A scan part handed back through a memory-backed file (lotus.query.handoff): the same object, writable
arrays, no file left behind, and the pipe when no file can be written."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lotus.query import handoff
from lotus.query.handoff import Sent, handoff_dir, receive, send


def _obj():
    return {"names": ["load", "collate"], "ints": np.arange(100_000, dtype=np.int64),
            "hist": np.ones((3, 4096)), "empty": np.zeros(0, np.int32), "strided": np.arange(20.0)[::2],
            "nested": [np.full(7, 3, np.int16), (1, 2.5, None)]}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert a["names"] == b["names"] and a["nested"][1] == b["nested"][1]
    assert np.array_equal(a["nested"][0], b["nested"][0])


def test_round_trip_through_a_file(tmp_path):
    with handoff_dir() as where:
        got = send(_obj(), where)
        assert isinstance(got, Sent) and sum(n for _, n in got.spans) >= 100_000 * 8 + 3 * 4096 * 8
        assert len(got.head) < 4096  # the arrays went to the file, not into the pickle
        out = receive(got)
        assert os.listdir(where) == []  # unlinked once mapped
        _same(_obj(), out)
        out["ints"][0] = -1  # private mapping: writable, the file's pages untouched
        out["hist"] += 1
        assert out["ints"][0] == -1 and out["hist"][0, 0] == 2
    assert not os.path.exists(where)


def test_the_directory_goes_even_on_error():
    with pytest.raises(RuntimeError), handoff_dir() as where:
        send(_obj(), where)  # a part never received
        raise RuntimeError("merge failed")
    assert not os.path.exists(where)


def test_no_room_goes_back_in_band(tmp_path, monkeypatch):
    """A directory that cannot take the file: the object itself comes back (the pool's pipe), no file left."""
    obj = _obj()
    assert send(obj, str(tmp_path / "missing")) is obj
    assert receive(obj) is obj

    def full(fd, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(handoff.os, "fdopen", full)
    assert send(obj, str(tmp_path)) is obj
    assert os.listdir(tmp_path) == []


def test_objects_without_arrays():
    with handoff_dir() as where:
        got = send({"a": 1, "b": [1, 2]}, where)
        assert isinstance(got, Sent) and got.spans == ()
        assert receive(got) == {"a": 1, "b": [1, 2]}


def _mapped(path: str) -> int:
    with open("/proc/self/maps") as fh:
        return sum(path in line for line in fh)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux's /proc")
def test_each_large_array_is_mapped_on_its_own():
    """An array the merge keeps must not hold the part's other arrays in memory: one mapping a large array,
    page-aligned in the file; dropping an array unmaps its bytes; small arrays are plain memory."""
    import gc
    import mmap

    with handoff_dir() as where:
        got = send({"keep": np.arange(50_000), "drop": np.ones(200_000), "small": np.arange(10)}, where)
        big = [(at, n) for at, n in got.spans if n >= handoff.MAP_MIN]
        assert len(big) == 2 and all(at % mmap.ALLOCATIONGRANULARITY == 0 for at, _ in big)
        out = receive(got)
        assert _mapped(got.path) == 2
        del out["drop"]
        gc.collect()
        assert _mapped(got.path) == 1 and out["keep"][-1] == 49_999 and out["small"].sum() == 45


def test_a_killed_scans_directory_is_removed_by_the_next(tmp_path, monkeypatch):
    """A scan killed before its cleanup leaves its directory (tmpfs memory); the next scan removes those of
    processes that are gone and untouched for STALE_S, never a live one's nor a recently written one."""
    import subprocess
    import sys
    import time

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    monkeypatch.setattr(handoff, "SHM", str(tmp_path))
    stale = tmp_path / f"{handoff.PREFIX}{dead}-abc"
    live = tmp_path / f"{handoff.PREFIX}{os.getppid()}-def"
    recent = tmp_path / f"{handoff.PREFIX}{dead}-ghi"  # a scan of another PID namespace, still writing
    for d in (stale, live, recent):
        d.mkdir()
        (d / "x.part").write_bytes(b"1234")
    old = time.time() - handoff.STALE_S - 60
    for d in (stale, live):
        os.utime(d, (old, old))
    with handoff_dir() as where:
        assert where.startswith(str(tmp_path / f"{handoff.PREFIX}{os.getpid()}-"))
        assert not stale.exists() and live.exists() and recent.exists()
    assert not os.path.exists(where)
