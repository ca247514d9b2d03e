"""Small traces of unusual shapes, written through lotus's own :class:`~lotus.trace.writer.TraceWriter`.

A :class:`Shape` says what the run was (ranks, workers, batch size, batches per epoch with empty epochs,
a partial last batch, preprocessing and step times, failed batches, an IterableDataset running out,
a share of detail batches, rotated parts, GPU timings, hosts whose clocks are a little apart); a tiny
model of torch's in-order DataLoader turns it into records (format 2: per-sample and per-op records
for detail batches only). Every time is a whole number of microseconds from fixed anchors, so the same
shape always gives the same files (hypothesis shrinks and replays them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter

US = 1_000
MS = 1_000_000
MONO0 = 1_000_000 * MS  # monotonic ns of every host's first event
WALL0 = 1_700_000_000 * 10**9  # wall-clock ns that MONO0 is on the first host
OPS = ("Decode", "Crop", "Normalize")


@dataclass(frozen=True)
class Shape:
    ranks: int = 1
    workers: int = 2  # 0: the main process prepares the batches (num_workers=0)
    batch_size: int = 4
    epochs: tuple[int, ...] = (6,)  # batches per epoch; 0: an empty epoch
    last_samples: int = 0  # samples of each epoch's last batch (0: a full batch)
    prep_us: tuple[int, ...] = (5_000,)  # preprocessing time per batch, cycled
    step_us: tuple[int, ...] = (3_000,)  # the loop's step per batch, cycled
    failed: frozenset = frozenset()  # (epoch, batch) whose fetch raises (the loop goes on)
    exhausted: int = 0  # per epoch: keys past the end that find the IterableDataset exhausted
    detail_every: int = 1  # every k-th batch carries per-sample/per-op records
    ops: int = 2  # transform ops per sample
    persistent: bool = False  # one worker process for all epochs
    rotate_bytes: int = 0  # > 0: every file rotates into parts of about this size
    gpu: bool = False  # CUDA-event timings and telemetry in the main files
    skew_us: tuple[int, ...] = (0,)  # clock offset of each rank's host, cycled (a different boot id)
    worker_skew_us: int = 0  # a worker process on a clock of its own, this far apart
    name: str = field(default="shape", compare=False)

    def samples(self, epoch_len: int, b: int) -> int:
        return self.last_samples if self.last_samples and b == epoch_len - 1 else self.batch_size


def _rec(w: TraceWriter, name_id: int, epoch: int, start: int, dur: int = 0, batch: int = -1, sample: int = -1,
         arg: int = 0) -> None:
    w.buf += w.pack(name_id, 0, epoch, start, dur, batch, sample, arg)


def _clock(host: str, skew_us: int) -> dict:
    return {"boot_id": f"boot-{host}", "hostname": host, "anchor_mono_ns": MONO0,
            "anchor_wall_ns": WALL0 + skew_us * US, "version": 2}


class _Writers:
    def __init__(self, d: Path, shape: Shape, rank: int):
        self.d, self.shape, self.rank = d, shape, rank
        self.clock = _clock(f"host{rank}", shape.skew_us[rank % len(shape.skew_us)])
        self.pid = 1000 * (rank + 1)
        kw = {"rotate_bytes": shape.rotate_bytes or None, "rank": rank, "world_size": shape.ranks}
        self.kw = kw
        self.main = TraceWriter(d, "main", extra={**self.clock, "pid": self.pid}, **kw)
        self.main.define_loader(0, {"name": "shape", "dataset": "Shape", "batch_size": shape.batch_size,
                                    "num_workers": shape.workers, "prefetch_factor": 2,
                                    "persistent_workers": shape.persistent, "pin_memory": False, "in_order": True,
                                    "drop_last": False, "sampler": "SequentialSampler"})
        self.open: dict[int, TraceWriter] = {}
        self.all = [self.main]

    def worker(self, w: int, epoch: int) -> TraceWriter:
        if w < 0:
            return self.main
        if w not in self.open:
            self.pid += 1
            clock = self.clock
            if w == 0 and self.shape.worker_skew_us:
                clock = {**_clock(f"host{self.rank}-w0", 0), "anchor_wall_ns": WALL0 + self.shape.worker_skew_us * US}
            wr = TraceWriter(self.d, "worker", worker_id=w, extra={**clock, "pid": self.pid, "main_pid": 1000 *
                                                                   (self.rank + 1)}, **self.kw)
            self.open[w] = wr
            self.all.append(wr)
            _rec(wr, S.EV_WORKER_START, epoch, self.t_workers, arg=w)
        return self.open[w]

    def end_epoch(self, epoch: int, t: int) -> None:
        if self.shape.persistent:
            return
        for w, wr in self.open.items():
            _rec(wr, S.EV_WORKER_END, epoch, t, arg=w)
        self.open = {}

    def close(self) -> None:
        for wr in self.all:
            wr.close()


def _prepare(ws: _Writers, shape: Shape, epoch: int, b: int, w: int, start: int, dur: int, n: int) -> None:
    """The worker side of one fetch: per-sample and per-op records (detail batches), collate, put, fetch."""
    wr = ws.worker(w, epoch)
    failed = (epoch, b) in shape.failed
    detail = b % shape.detail_every == 0
    ops = [wr.name_id(OPS[k]) for k in range(shape.ops)]
    collate = max(dur // 10, US)
    per = max((dur - collate - 4 * US) // max(n, 1), 4 * US)
    t = start + US
    if detail:
        for s in range(n if not failed else 1):
            load = per // 2
            op = max((per - load - US) // max(len(ops), 1), US)
            o = t + load
            for nid in ops:  # op records precede their item's `sample` record (format 2)
                _rec(wr, nid, epoch, o, op, b, s)
                o += op
            _rec(wr, S.EV_SAMPLE, epoch, t, o - t, b, s, arg=load)
            t += per
    flags = (S.FETCH_ERROR if failed else 0) | (S.FETCH_DETAIL if detail else 0)
    if not failed:
        _rec(wr, S.EV_COLLATE, epoch, start + dur - collate - 2 * US, collate, b, arg=n)
        _rec(wr, S.EV_PUT, epoch, start + dur - US, US // 2, b)
    _rec(wr, S.EV_FETCH, epoch, start, dur, b, arg=flags)
    if wr is not ws.main:
        wr.flush()  # a worker flushes after every batch it puts (and rotates there)


def _epoch(ws: _Writers, shape: Shape, epoch: int, t: int) -> int:
    """Records of one epoch from ``t`` (ns); returns the epoch's end."""
    main, nw = ws.main, shape.workers
    n_b = shape.epochs[epoch]
    _rec(main, S.EV_EPOCH_START, epoch, t, arg=nw)
    ws.t_workers = t + 2 * MS
    free = [t + 2 * MS] * max(nw, 1)
    keys = n_b + (shape.exhausted if nw else 0)
    depth = 2 * nw
    dispatch = {k: t + (k + 1) * 10 * US for k in range(min(depth, keys))}
    ready = {}
    for k in range(min(depth, keys)):
        ready[k] = _fetch(ws, shape, epoch, k, dispatch[k], free, n_b) if nw else None
    request = t + 100 * US
    for b in range(n_b):
        prep = shape.prep_us[b % len(shape.prep_us)] * US
        if nw == 0:
            _rec(main, S.EV_DISPATCH, epoch, request, 5 * US, b, arg=-1)
            _prepare(ws, shape, epoch, b, -1, request + 5 * US, prep, shape.samples(n_b, b))
            got = request + 5 * US + prep + 20 * US
        else:
            got = max(request, ready[b] + 100 * US) + 20 * US
            _rec(main, S.EV_ARRIVE, epoch, got - 20 * US, 0, b)
        _rec(main, S.EV_WAIT, epoch, request, got - request, b)
        if shape.gpu:
            _rec(main, S.EV_GPU_WAIT, epoch, request, got - request, b, arg=1)
        nxt = b + depth
        if nw and nxt < keys:  # the hand-off (or the exception) frees a slot: the next index is dispatched
            dispatch[nxt] = got + 5 * US
            ready[nxt] = _fetch(ws, shape, epoch, nxt, dispatch[nxt], free, n_b)
        if (epoch, b) in shape.failed:  # the loop caught the exception and asks for the next batch
            request = got + 50 * US
            continue
        _rec(main, S.EV_CONSUMED, epoch, got, 0, b)
        step = shape.step_us[b % len(shape.step_us)] * US
        _rec(main, S.EV_STEP, epoch, got, step, b)
        if shape.gpu:
            _rec(main, S.EV_GPU_STEP, epoch, got, step, b, arg=1)
            _rec(main, S.EV_GPU_UTIL, epoch, got, arg=80)
            _rec(main, S.EV_GPU_POWER, epoch, got, arg=250_000)
            _rec(main, S.EV_GPU_ENERGY, epoch, got, arg=1_000 * (b + 1))
        request = got + step
    end = max([request, *free]) + 100 * US if n_b or keys else t + 200 * US
    _rec(main, S.EV_EPOCH_END, epoch, end, arg=0)
    ws.end_epoch(epoch, end)
    main.flush()
    return end + 5 * MS


def _fetch(ws: _Writers, shape: Shape, epoch: int, k: int, at: int, free: list, n_b: int) -> int:
    """Dispatch key ``k`` at ``at`` to its worker (round robin) and prepare it; returns when it is ready."""
    nw = shape.workers
    w = k % nw
    _rec(ws.main, S.EV_DISPATCH, epoch, at, 5 * US, k, arg=w)
    start = max(at + 50 * US, free[w])
    if k >= n_b:  # past the end of the IterableDataset: this worker finds it exhausted
        wr = ws.worker(w, epoch)
        _rec(wr, S.EV_EXHAUSTED, epoch, start, 30 * US, k)
        _rec(wr, S.EV_PUT, epoch, start + 30 * US, US, k)
        _rec(ws.main, S.EV_ARRIVE, epoch, start + 200 * US, 0, k, arg=S.ARRIVE_EXHAUSTED)
        free[w] = start + 31 * US
        return free[w]
    prep = shape.prep_us[k % len(shape.prep_us)] * US
    _prepare(ws, shape, epoch, k, w, start, prep, shape.samples(n_b, k))
    free[w] = start + prep
    return free[w]


def write_shape(directory, shape: Shape) -> Path:
    """Write the run of ``shape`` into ``directory`` (one run); returns the directory."""
    d = Path(directory)
    for rank in range(shape.ranks):
        ws = _Writers(d, shape, rank)
        t = MONO0 + rank * 37 * US
        try:
            for epoch in range(len(shape.epochs)):
                t = _epoch(ws, shape, epoch, t)
            if shape.persistent:
                for w, wr in ws.open.items():
                    _rec(wr, S.EV_WORKER_END, len(shape.epochs) - 1, t, arg=w)
        finally:
            ws.close()
    return d
