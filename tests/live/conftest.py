"""Helpers of the live-view tests: synthetic runs written with the real TraceWriter."""

from __future__ import annotations

import time

import pytest

from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter

MS = 1_000_000
SEC = 1_000_000_000


def rec(w: TraceWriter, name_id, start, dur=0, batch=-1, sample=-1, arg=0, loader=0, epoch=0):
    w.buf += w.pack(name_id, loader, epoch, start, dur, batch, sample, arg)


def write_known_run(d, t0: int, *, close: bool = True, n_batches: int = 100, gpu: bool = True):
    """A run with known truth over [t0, t0 + 10 s]: batch i (32 samples) is prepared by worker i % 2
    in [t0 + i*0.1 s, + 60 ms], waited for 20 ms and consumed at t0 + (i+1)*0.1 s; ops: Resize 1 ms and
    Normalize 0.5 ms per sample; gpu_wait 5 ms per batch.

    Truth at now = t0 + 10 s, window 10 s: 320 samples/s, 10 batches/s, wait share 0.2, GPU idle 0.05,
    busy share 0.3 per worker, slowest op Resize (1 ms per call), queue 0, in flight 0.
    """
    main = TraceWriter(d, "main")
    main.define_loader(0, {"name": "train", "dataset": "Photos", "batch_size": 32, "num_workers": 2})
    workers = [TraceWriter(d, "worker", worker_id=k) for k in range(2)]
    # TraceWriter names files by pid: the workers of this test share one pid, so one gets a -2 suffix
    rec(main, S.EV_EPOCH_START, t0, arg=2)
    for w in workers:
        rec(w, S.EV_WORKER_START, t0, arg=w.worker_id)
    ids = [(w.name_id("Resize"), w.name_id("Normalize")) for w in workers]
    for i in range(n_batches):
        k = i % 2
        w = workers[k]
        s = t0 + i * 100 * MS
        rec(main, S.EV_DISPATCH, s - 1 * MS, 10_000, batch=i, arg=k)
        rec(w, S.EV_FETCH, s, 60 * MS, batch=i)
        for j in range(32):
            rec(w, S.EV_SAMPLE, s + j * MS, MS, batch=i, sample=i * 32 + j)
            rec(w, ids[k][0], s + j * MS, MS, batch=i, sample=i * 32 + j)
            rec(w, ids[k][1], s + j * MS, MS // 2, batch=i, sample=i * 32 + j)
        rec(w, S.EV_COLLATE, s + 55 * MS, 5 * MS, batch=i, arg=32)
        rec(main, S.EV_ARRIVE, s + 61 * MS, batch=i)
        c = t0 + (i + 1) * 100 * MS
        rec(main, S.EV_WAIT, c - 20 * MS, 20 * MS, batch=i)
        rec(main, S.EV_CONSUMED, c, batch=i)
        if gpu:
            rec(main, S.EV_GPU_WAIT, c - 20 * MS, 5 * MS, batch=i, arg=1)
    rec(main, S.EV_EPOCH_END, t0 + n_batches * 100 * MS)
    for w in (main, *workers):
        if close:
            w.close()
        else:
            w.flush()
    return main, workers


@pytest.fixture
def now_mono() -> int:
    return time.monotonic_ns()


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
