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
        assert isinstance(got, Sent) and sum(got.sizes) >= 100_000 * 8 + 3 * 4096 * 8
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
        assert isinstance(got, Sent) and got.sizes == ()
        assert receive(got) == {"a": 1, "b": [1, 2]}
