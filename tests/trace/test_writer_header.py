"""The trace header is assembled from its process's cached parts with plain values formatted without json (a
forked worker's set-up: lotus.trace.header); its bytes are json.dumps of the header, field for field, as
the format (docs/trace-format.md) defines it."""

import json
import socket
import sys

import pytest

from lotus import __version__
from lotus.trace import schema as S
from lotus.trace import writer as W
from lotus.trace.header import boot_id

ANCHOR = (1_700_000_000_123_456_789, 987_654_321)


def _expected(role, rank, world_size, worker_id, pid, extra) -> bytes:
    """The header as the format defines it, through json.dumps: the reference the writer must equal."""
    header = {"format": "lotus-trace", "version": S.FORMAT_VERSION, "role": role, "pid": pid, "rank": rank,
              "world_size": world_size, "worker_id": worker_id, "hostname": socket.gethostname(),
              "boot_id": boot_id(), "anchor_wall_ns": ANCHOR[0], "anchor_mono_ns": ANCHOR[1],
              "clock": "monotonic", "lotus_version": __version__,
              "torch_version": getattr(sys.modules.get("torch"), "__version__", None), "argv": list(sys.argv[:16]),
              "builtin_events": {e.id: e.name for e in S.BUILTIN_EVENTS}, **(extra or {})}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return S.PREAMBLE.pack(S.MAGIC, len(raw), S.RECORD_SIZE) + raw


def _written(tmp_path, role, worker_id, extra, world_size=4):
    w = W.TraceWriter(tmp_path, role, rank=1, world_size=world_size, worker_id=worker_id, extra=extra)
    try:
        assert w.ok
        return w._preamble(world_size, extra, anchor=ANCHOR), _expected(role, 1, world_size, worker_id, w.pid, extra)
    finally:
        w.close()


@pytest.mark.parametrize("role, worker_id, extra", [
    ("main", S.NO_ID, None),
    ("worker", 3, {"main_pid": 1234, "detail_budget_pct": 0.5}),
    ("worker", 0, {"main_pid": 1234, "detail_budget_pct": None, "part": 0}),
    ("main", S.NO_ID, {"flag": True, "name": "plain text", "ratio": 1e-07, "n": -3}),
    # values json formats (escapes, non-ASCII, not finite, nested)
    ("worker", 1, {"nested": {"a": [1, 2]}, "quote": 'say "hi"', "back": "a\\b", "unicode": "caf\u00e9",
                   "nan": float("nan"), "inf": float("-inf"), "tab": "a\tb"}),
])
def test_header_is_json_dumps_of_the_header(tmp_path, role, worker_id, extra):
    got, want = _written(tmp_path, role, worker_id, extra)
    assert got == want
    head = json.loads(got[S.PREAMBLE.size:].decode().rstrip())
    assert head["role"] == role and head["worker_id"] == worker_id and head["anchor_mono_ns"] == ANCHOR[1]


def test_cached_parts_follow_torch_and_argv(tmp_path, monkeypatch):
    """A header written after argv changed (or torch was imported) names them, not the cached values."""
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "1"])
    got, want = _written(tmp_path, "main", S.NO_ID, None)
    assert got == want and b'"argv":["train.py","--epochs","1"]' in got
    monkeypatch.setattr(sys, "argv", ["other.py"])
    got, want = _written(tmp_path, "main", S.NO_ID, None)
    assert got == want and b'"argv":["other.py"]' in got


@pytest.mark.parametrize("extra", [{"rank": 7}, {"boot_id": "other-host", "anchor_mono_ns": 5, "main_pid": 3},
                                   {"hostname": "h", "argv": ["x"], "role": "main"}])
def test_an_extra_field_named_as_the_headers_own_replaces_it_in_place(tmp_path, extra):
    """As dict.update: the field keeps its place, its value is the extra's (how tests write a file of
    another host); the cached parts are not touched by it."""
    got, want = _written(tmp_path, "worker", 2, extra)
    assert got == want
    got, want = _written(tmp_path, "worker", 2, None)
    assert got == want
