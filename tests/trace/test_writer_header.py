"""The trace header a writer makes from its process's cached parts (lotus.trace.writer._fast_header: a forked
worker's set-up without json) is byte for byte what json.dumps of the whole header gives."""

import json
import sys

import pytest

from lotus.trace import schema as S
from lotus.trace import writer as W


def _both(tmp_path, monkeypatch, role, worker_id, extra, world_size=4):
    w = W.TraceWriter(tmp_path, role, rank=1, world_size=world_size, worker_id=worker_id, extra=extra)
    try:
        anchor = (1_700_000_000_123_456_789, 987_654_321)
        fast = w._preamble(world_size, extra, anchor=anchor)
        monkeypatch.setattr(W.TraceWriter, "_fast_header", lambda *a: None)
        slow = w._preamble(world_size, extra, anchor=anchor)
        monkeypatch.undo()
        return fast, slow
    finally:
        w.close()


@pytest.mark.parametrize("role, worker_id, extra", [
    ("main", S.NO_ID, None),
    ("worker", 3, {"main_pid": 1234, "detail_budget_pct": 0.5}),
    ("worker", 0, {"main_pid": 1234, "detail_budget_pct": None, "part": 0}),
    ("main", S.NO_ID, {"flag": True, "name": "plain text", "ratio": 1e-07, "n": -3}),
])
def test_fast_header_is_json_dumps_of_the_header(tmp_path, monkeypatch, role, worker_id, extra):
    fast, slow = _both(tmp_path, monkeypatch, role, worker_id, extra)
    assert fast == slow
    head = json.loads(fast[S.PREAMBLE.size:].decode().rstrip())
    assert head["role"] == role and head["worker_id"] == worker_id and head["anchor_mono_ns"] == 987_654_321


@pytest.mark.parametrize("extra", [
    {"nested": {"a": 1}},  # not a plain value: json.dumps writes the header
    {"quote": 'say "hi"'},
    {"rank": 7},  # a key of the header itself: its value replaces the header's, in place
    {"nan": float("nan")},
    {"unicode": "caf\u00e9"},
])
def test_headers_the_fast_path_declines_are_still_written(tmp_path, monkeypatch, extra):
    fast, slow = _both(tmp_path, monkeypatch, "worker", 1, extra)
    assert fast == slow


def test_cached_parts_follow_torch_and_argv(tmp_path, monkeypatch):
    """A header written after torch was imported (or argv changed) names them, not the cached values."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "1"])
    fast, slow = _both(tmp_path, monkeypatch, "main", S.NO_ID, None)
    assert fast == slow and b'"argv":["train.py","--epochs","1"]' in fast
    monkeypatch.setattr(sys, "argv", ["other.py"])
    fast2, slow2 = _both(tmp_path, monkeypatch, "main", S.NO_ID, None)
    assert fast2 == slow2 and b'"argv":["other.py"]' in fast2
