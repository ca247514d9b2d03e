"""lotus.profile.diskprobe: N readers of a dataset's files, whole files, evicted before and after."""

from __future__ import annotations

import time

import pytest

from lotus.profile.diskprobe import replay


@pytest.fixture
def files(tmp_path):
    out = []
    for i in range(20):
        out.append(tmp_path / f"{i:02d}.bin")
        out[-1].write_bytes(bytes([i]) * (64 << 10))
    return [str(f) for f in out]


def test_every_file_of_the_sample_is_read_whole(files):
    r = replay(files, 3, seconds=30.0)
    assert (r.readers, r.files, r.bytes, r.failed) == (3, 20, 20 * (64 << 10), 0)
    assert r.read_ms > 0 and r.bytes_per_s > 0


def test_the_sample_is_bounded_by_bytes_and_time(files):
    assert replay(files, 2, max_bytes=5 * (64 << 10)).files == 5
    t0 = time.perf_counter()
    r = replay(files, 1, think_s=0.05, seconds=0.2)  # a pause between two files: a few files in 0.2 s
    assert 1 <= r.files <= 6 and time.perf_counter() - t0 < 5


def test_unreadable_files_are_counted_not_raised(files, tmp_path):
    (tmp_path / "dir").mkdir()
    r = replay([str(tmp_path / "dir"), str(tmp_path / "absent")], 2, seconds=5.0)
    assert r.files == 0 and r.read_ms is None and r.bytes_per_s is None and r.failed == 1
