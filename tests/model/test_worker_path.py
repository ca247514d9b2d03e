"""A num_workers=0 trace predicting workers (lotus.model.engine, lotus.profile.shmprobe): the loop thread's
run-queue delay taken out of each batch, the worker path's cost of a batch's bytes added."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lotus.profile import shmprobe


def test_the_probe_prices_shared_memory_on_this_machine(monkeypatch):
    c = shmprobe.measure(8 << 20, repeats=2)
    assert c is not None and c.nbytes == 8 << 20
    assert c.shared_ms > 0 and c.private_ms > 0 and c.touch_ms > 0
    assert c.write_ns_per_byte >= 0 and 0 < c.touch_ns_per_byte < 100  # ns a byte: a page fault is ~1 us / 4 kB
    assert c.write_ns_per_byte == pytest.approx(max(c.shared_ms - c.private_ms, 0) * 1e6 / (8 << 20))
    monkeypatch.setattr(shmprobe, "MAX_BYTES", 1 << 20)
    assert shmprobe.measure(10 << 30, repeats=1).nbytes == 1 << 20  # capped: the cost is priced per byte


def test_without_shared_memory_the_probe_says_none(monkeypatch):
    from multiprocessing import shared_memory

    def refuse(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shared_memory, "SharedMemory", refuse)
    assert shmprobe.measure(1 << 20) is None


class Tensors:
    """Samples of 1 ms of Python CPU, each a 3x64x64 float tensor (49,152 bytes)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time

        import torch

        end = time.thread_time_ns() + 1_000_000
        while time.thread_time_ns() < end:
            pass
        return torch.full((3, 64, 64), float(i))


@pytest.fixture(scope="module")
def nw0_model(tmp_path_factory):
    from lotus.dataloader import DataLoader
    from lotus.model.fitting import fit, load_run

    d = tmp_path_factory.mktemp("nw0")
    for _ in range(2):
        for _ in DataLoader(Tensors(8 * 80), batch_size=8, trace_dir=d):
            pass
    return fit(load_run(d))


@pytest.mark.timeout(120)
def test_the_trace_gives_the_batch_bytes_and_the_loop_threads_delay(nw0_model):
    m = nw0_model
    assert m.without_workers and m.traced.batch_bytes == 8 * 3 * 64 * 64 * 4
    assert m.measured.loop_runq_ns is not None and len(m.measured.loop_runq_ns) == len(m.measured.n)
    assert (m.measured.loop_runq_ns >= 0).all()


@pytest.mark.timeout(120)
def test_the_worker_path_is_priced_only_from_runs_without_workers(nw0_model):
    m = copy.copy(nw0_model)
    assert m.worker_path_ns(2, 8) == (0.0, 0.0)  # not probed
    m.shm_ns_per_byte = (2.0, 0.5)
    nbytes = 8 * 3 * 64 * 64 * 4
    assert m.worker_path_ns(2, 8) == pytest.approx((2.0 * nbytes, 0.5 * nbytes))
    assert m.worker_path_ns(2, 16) == pytest.approx((4.0 * nbytes, 1.0 * nbytes))  # scales with the batch
    assert m.worker_path_ns(0, 8) == (0.0, 0.0)  # the traced path itself
    with_workers = copy.copy(m)
    with_workers.runs = [*m.runs, copy.copy(m.traced)]
    with_workers.runs[-1].num_workers = 2
    assert with_workers.worker_path_ns(2, 8) == (0.0, 0.0)  # a run with workers measured it


@pytest.mark.timeout(120)
def test_a_worker_pays_the_shared_memory_and_not_the_loop_threads_wait(nw0_model):
    base = copy.copy(nw0_model)
    base.measured = copy.copy(nw0_model.measured)
    m = base.measured
    # the loop thread's measured waits for a CPU set to none (they depend on the load of the host running the
    # test): the base is what a worker pays; "waited" below then adds a known wait, half of each batch's work
    m.loop_runq_ns = np.zeros(len(m.n))
    cpus = 4.0
    rate = base.predict(1, cpus).samples_per_s
    priced = copy.copy(base)
    priced.shm_ns_per_byte = (20.0, 0.0)  # 7.9 ms a batch of 393 kB: about a dozen samples' worth
    assert priced.predict(1, cpus).samples_per_s < 0.9 * rate
    assert priced.predict(0, cpus).samples_per_s == pytest.approx(base.predict(0, cpus).samples_per_s)
    waited = copy.copy(base)
    waited.measured = copy.copy(base.measured)
    waited.measured.loop_runq_ns = 0.5 * (m.items_ns + m.collate_ns + m.other_ns)  # half of it waiting for a CPU
    assert waited.predict(1, cpus).samples_per_s > 1.3 * rate
    assert waited.predict(0, cpus).samples_per_s == pytest.approx(base.predict(0, cpus).samples_per_s)


@pytest.mark.timeout(120)
def test_the_commands_price_it_only_from_runs_without_workers(nw0_model):
    from lotus.model.workerpath import price

    m = copy.copy(nw0_model)
    assert price(m) and m.shm_ns_per_byte is not None and m.shm_ns_per_byte[0] >= 0
    with_workers = copy.copy(nw0_model)
    with_workers.runs = [*nw0_model.runs, copy.copy(nw0_model.traced)]
    with_workers.runs[-1].num_workers = 2
    assert not price(with_workers) and with_workers.shm_ns_per_byte is None
    no_bytes = copy.copy(nw0_model)
    no_bytes.traced = copy.copy(nw0_model.traced)
    no_bytes.traced.batch_bytes = None  # a trace of format < 6
    assert not price(no_bytes)


def test_the_probe_stays_within_the_room_of_dev_shm(monkeypatch):
    """A container's /dev/shm may hold 64 MB: writing past it is a SIGBUS, not an error; the probe measures at
    most half the room and none without it."""
    monkeypatch.setattr(shmprobe, "_shm_room", lambda: 4 << 20)
    assert shmprobe.measure(77 << 20, repeats=1).nbytes == 2 << 20
    monkeypatch.setattr(shmprobe, "_shm_room", lambda: 0)
    assert shmprobe.measure(77 << 20, repeats=1) is None


def test_loop_runq_of_unmeasured_fetches_at_the_measured_share():
    """The loop thread measures one fetch in METER_EVERY: the others' run-queue delay is taken at the measured
    fetches' delay per ns of fetch (not 0: a num_workers=0 trace would keep most of it in its batches)."""
    import pandas as pd

    from lotus.model.observation import _loop_runq

    class Src:
        def __init__(self, df):
            self.df = df

        def has(self, name):
            return name in self.df

        def cols(self, names):
            return self.df[names]

    df = pd.DataFrame({"runq_ns": pd.array([100, None, None, 300, None], dtype="Int64"),
                       "prep_dur_ns": pd.array([1000, 2000, 500, 1000, 1000], dtype="Int64")})
    got = _loop_runq(Src(df), np.ones(5, bool))
    assert got.tolist() == [100.0, 400.0, 100.0, 300.0, 200.0]  # 400 ns of delay in 2,000 ns measured: 0.2
    none = pd.DataFrame({"runq_ns": pd.array([None] * 3, dtype="Int64"), "prep_dur_ns": [1, 2, 3]})
    assert _loop_runq(Src(none), np.ones(3, bool)) is None
