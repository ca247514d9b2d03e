"""The kernel's view (trace formats 4-5): lotus.dataloader.schedstat, the worker's `runq` records and the
main process's `main_cpu` records, read back as the batches' runq_ns/prep_cpu_ns/disk_read_bytes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lotus.dataloader.schedstat import IO_PATH, PATH, ThreadIO, ThreadSched

HAVE = Path(PATH).exists()
needs_schedstat = pytest.mark.skipif(not HAVE, reason="no /proc/thread-self/schedstat here")


@needs_schedstat
def test_a_thread_reads_its_own_cpu_time():
    s = ThreadSched()
    cpu0, runq0 = s.read()
    end = time.thread_time_ns() + 30_000_000
    while time.thread_time_ns() < end:
        pass
    time.sleep(0.05)  # sleeping is not CPU time
    cpu1, runq1 = s.read()
    assert 25_000_000 <= cpu1 - cpu0 <= 70_000_000 and runq1 >= runq0


@needs_schedstat
def test_the_descriptor_stays_with_the_thread_that_opened_it():
    s = ThreadSched()
    before = s.read()[0]
    got = []

    def other():
        end = time.thread_time_ns() + 30_000_000
        while time.thread_time_ns() < end:
            pass
        got.append(s.read()[0])

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got[0] - before < 20_000_000  # the other thread's 30 ms are not the opener's


def test_without_procfs_it_reads_nothing(tmp_path):
    s = ThreadSched(str(tmp_path / "absent"))
    assert s.fd == -1 and s.read() is None
    bad = tmp_path / "bad"
    bad.write_text("not numbers\n")
    s = ThreadSched(str(bad))
    assert s.read() is None and s.fd == -1  # a file it cannot parse: closed, and nothing from then on


@needs_schedstat
@pytest.mark.timeout(120)
def test_a_traced_run_records_each_fetch_and_the_main_process(tmp_path):
    from lotus.dataloader import DataLoader
    from lotus.query import load_batches
    from lotus.trace import load_events
    from lotus.trace import schema as S
    from tests.dataloader.datasets import SpinDS

    loader = DataLoader(SpinDS(96, ms=1.0, sleep_ms=1.0), batch_size=4, num_workers=2, trace_dir=tmp_path)
    for _ in range(2):
        for _ in loader:
            pass
    del loader
    b = load_batches(tmp_path)
    assert len(b) == 48 and b["runq_ns"].notna().all() and b["prep_cpu_ns"].notna().all()
    prep, runq, cpu = (b[c].to_numpy(np.int64) for c in ("prep_dur_ns", "runq_ns", "prep_cpu_ns"))
    assert (runq >= 0).all() and (cpu > 0).all() and (runq + cpu <= prep + 1_000_000).all()
    # 4 items of 1 ms CPU + 1 ms sleep: about 4 ms on a CPU out of at least 8 ms
    assert 3.5e6 <= np.median(cpu) <= 8e6 and (prep >= 8e6).all()
    ev = load_events(tmp_path)
    m = ev[ev["name"] == "main_cpu"].sort_values("start_ns")
    assert len(m) == -(-48 // S.MAIN_CPU_EVERY)  # every 16 of the loader's hand-offs (its first included)
    assert (np.diff(m["arg"].to_numpy()) >= 0).all() and (m["sample"] >= 0).all()


@needs_schedstat
@pytest.mark.timeout(120)
@pytest.mark.parametrize("pin", [False, True])
def test_without_workers_the_loop_threads_fetches_are_measured(tmp_path, pin):
    """Format 6: the batches the loop's thread prepares itself carry their runq record too (its run-queue
    delay: a num_workers=0 job's own intra-op threads took the CPU from it 4x over on a 2-CPU machine), one
    fetch in METER_EVERY (the first, then every METER_EVERY-th: each costs three procfs reads); no main_cpu
    records (the loop's thread is the whole of it). The plain fast path and the pinned path."""
    from lotus.dataloader import DataLoader
    from lotus.dataloader.schedstat import METER_EVERY
    from lotus.query import load_batches
    from lotus.trace import load_events
    from tests.dataloader.datasets import SpinDS

    n = 4 * METER_EVERY  # batches
    for _ in DataLoader(SpinDS(4 * n, ms=1.0), batch_size=4, trace_dir=tmp_path, pin_memory=pin):
        pass
    ev = load_events(tmp_path)
    assert not (ev["name"] == "main_cpu").any()
    r = ev[ev["name"] == "runq"]
    assert len(r) == 4 and (r["worker_id"] == -1).all()
    b = load_batches(tmp_path).sort_values("batch_id")
    have = b["runq_ns"].notna().to_numpy()
    assert (np.flatnonzero(have) == np.arange(0, n, METER_EVERY)).all()
    cpu, prep = b["prep_cpu_ns"].to_numpy()[have].astype(np.int64), b["prep_dur_ns"].to_numpy()[have].astype(np.int64)
    assert (cpu >= 3.5e6).all()
    # measured from the fetch's start to the batch's return (its collation's end + torch's bookkeeping; the
    # epoch's first batch a few ms more)
    assert (cpu[1:] <= prep[1:] + 1e6).all() and cpu[0] <= prep[0] + 5e6


# -- bytes read from storage (trace format 5) ----------------------------------------------------------------
class FilesDS:
    """One sample a file, read whole (a map-style dataset)."""

    def __init__(self, files):
        self.files = [str(f) for f in files]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            return len(f.read())


def _storage_counts(tmp_path: Path) -> bool:
    """Whether reads of files evicted from the page cache under ``tmp_path`` reach a block device (not tmpfs)."""
    from lotus.profile import pagecache

    f = tmp_path / "probe.bin"
    f.write_bytes(b"x" * (1 << 20))
    pagecache.evict([str(f)])
    io = ThreadIO()
    before = io.read()
    f.read_bytes()
    after = io.read()
    return before is not None and after is not None and after - before > 0


def test_thread_io_reads_bytes_read_from_storage(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("rchar: 1\n")
    assert ThreadIO(str(bad)).fd == -1  # no read_bytes line: closed at once
    assert ThreadIO(str(tmp_path / "absent")).read() is None
    if not Path(IO_PATH).exists():
        pytest.skip("no /proc/thread-self/io here")
    io = ThreadIO()
    a = io.read()
    assert isinstance(a, int) and a >= 0
    (tmp_path / "w.bin").write_bytes(b"y" * (1 << 20))
    (tmp_path / "w.bin").read_bytes()  # just written, so from the page cache: not a storage read
    assert io.read() - a < 4096


@needs_schedstat
@pytest.mark.timeout(180)
def test_a_traced_run_records_the_bytes_each_fetch_read_from_storage(tmp_path, monkeypatch):
    from lotus.dataloader import DataLoader
    from lotus.profile import pagecache
    from lotus.query import load_batches
    from tests.trace.test_scan import compare

    if not Path(IO_PATH).exists():
        pytest.skip("no /proc/thread-self/io here")
    data = tmp_path / "data"
    data.mkdir()
    files = []
    for i in range(32):
        files.append(data / f"{i:03d}.bin")
        files[-1].write_bytes(bytes([i]) * (64 << 10))
    pagecache.evict([str(f) for f in files])
    run = tmp_path / "run"
    for _ in DataLoader(FilesDS(files), batch_size=4, num_workers=2, trace_dir=run):
        pass
    b = load_batches(run)
    assert len(b) == 8 and b["disk_read_bytes"].notna().all() and (b["disk_read_bytes"] >= 0).all()
    if _storage_counts(tmp_path):  # a block device under tmp_path: the evicted files were read from it
        assert b["disk_read_bytes"].sum() >= 0.5 * 32 * (64 << 10)
    compare(run, monkeypatch)  # the out-of-core engine's batches carry the same column
