"""Nothing waits for exit: records reach the file when an epoch ends, when an iterator is dropped or
shut down, and otherwise within about a second, also while the loop is blocked (issue 8, item 2)."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from lotus.dataloader import DataLoader
from lotus.query import load_batches
from lotus.trace import load_events
from lotus.trace.writer import close_main_writers
from tests.dataloader import datasets as D


def _consumed(path) -> int:
    b = load_batches(path)
    return int(b["consumed_ns"].notna().sum())


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    close_main_writers()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_break_then_del_iterator_trace_is_complete_in_process(tmp_path, workers):
    loader = DataLoader(D.MapDS(n=400), batch_size=4, num_workers=workers, trace_dir=tmp_path)
    it = iter(loader)
    for _ in range(30):
        next(it)
    del it
    gc.collect()
    assert _consumed(tmp_path) == 30
    ends = load_events(tmp_path).query("name == 'epoch_end'")
    assert list(ends["arg"]) == [1]  # abandoned, not exhausted


@pytest.mark.timeout(60)
def test_loop_break_and_deleted_persistent_loader(tmp_path):
    loader = DataLoader(D.MapDS(n=400), batch_size=4, num_workers=2, persistent_workers=True,
                        trace_dir=tmp_path)
    for i, _ in enumerate(loader):
        if i == 11:
            break
    del loader
    gc.collect()
    assert _consumed(tmp_path) == 12


@pytest.mark.timeout(60)
def test_records_reach_the_file_while_the_loop_is_blocked(tmp_path):
    # batch 4 takes 3 s in its worker: while next() blocks on it, what happened before is on disk
    loader = DataLoader(D.SlowAtDS(n=64, slow_at=16, slow_s=3.0), batch_size=4, num_workers=1,
                        trace_dir=tmp_path)
    it = iter(loader)
    for _ in range(4):
        next(it)
    seen = {}

    def look():
        time.sleep(1.6)
        seen["consumed"] = _consumed(tmp_path)
        seen["samples_of_slow_batch"] = int(load_events(tmp_path).query("name == 'sample' and batch_id == 4")
                                            .shape[0])

    t = threading.Thread(target=look)
    t.start()
    next(it)  # blocks about 3 s
    t.join()
    assert seen["consumed"] == 4
    # the worker is inside batch 4 (sample 16 sleeps): nothing of it is finished yet, but its
    # samples 17.. would only come after; the flusher wrote the batch's start events meanwhile
    assert seen["samples_of_slow_batch"] == 0
    del it


@pytest.mark.timeout(60)
def test_worker_records_inside_a_long_batch_are_written_within_a_second(tmp_path):
    # the sample sleeping 3 s is the last of batch 0: the samples before it must not wait for it
    loader = DataLoader(D.SlowAtDS(n=8, slow_at=3, slow_s=3.0), batch_size=4, num_workers=1,
                        trace_dir=tmp_path)
    it = iter(loader)
    seen = {}

    def look():
        time.sleep(2.0)
        seen["samples"] = int(load_events(tmp_path).query("name == 'sample' and batch_id == 0").shape[0])

    t = threading.Thread(target=look)
    t.start()
    next(it)
    t.join()
    assert seen["samples"] == 3
    del it
