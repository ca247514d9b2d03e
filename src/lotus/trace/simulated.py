"""The simulated input pipeline behind :mod:`lotus.trace.synthetic`: spec, batch sizes, per-sample costs.

:func:`simulate` runs the discrete-event model of torch's DataLoader of :mod:`lotus.sim` (workers
picked round robin, ``prefetch_factor`` batches in flight per worker, in-order delivery, a training step
of fixed mean length, optionally a CPU limit) on per-sample load/op times drawn from log-normal
distributions around the means of the original study (ImageNet, ResNet-18, b128). The writers of both
trace formats are in :mod:`lotus.trace.synthetic`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

DEFAULT_OPS_MS = {"RandomResizedCrop": 1.04, "RandomHorizontalFlip": 0.058, "ToTensor": 0.317, "Normalize": 0.211}
_NATIVE_PER_SAMPLE_FIXED = 3  # sample, load, transform
_NATIVE_PER_BATCH = 8  # fetch, collate, put; dispatch, wait, consumed, arrive, step
_ORIGINAL_PER_SAMPLE_FIXED = 2  # SLoader, STransform
_ORIGINAL_PER_BATCH = 4  # SCollation, SBatchPreprocessed; SBatchWait, SBatchConsumed
_GAP_NS = 2_000  # between consecutive samples / parts of a batch


@dataclass(frozen=True)
class PipelineSpec:
    """What to simulate. Times are means; each draw is log-normal with sigma ``jitter``."""

    n_batches: int = 20  # per epoch and rank
    batch_size: int = 16
    n_workers: int = 2
    epochs: int = 1
    ranks: int = 1
    load_ms: float = 4.69
    ops_ms: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_OPS_MS))
    collate_ms_per_sample: float = 0.39
    step_ms: float = 30.0
    prefetch_factor: int = 2
    jitter: float = 0.25
    seed: int = 0
    start_wall_ns: int = 1_700_000_000_000_000_000
    first_pid: int = 1000
    straggler_every: int = 0  # every n-th batch (n > 0) is a straggler...
    straggler_factor: float = 5.0  # ...whose samples take this many times longer
    cpus: int | None = None  # CPUs of the simulated job (None: no CPU limit; recorded as cpus_available)
    main_cpu_cores: float = 1.0  # CPU the main process uses (lotus.sim.cpu_stretch)
    contention: float = 0.0  # slowdown per extra worker running at once (lotus.sim.cpu_stretch)
    cpu_fraction: float = 1.0  # share of worker time that needs a CPU (lotus.sim.cpu_stretch)
    slicing: float = 0.0  # extra CPU work per extra runnable a CPU beyond one (lotus.sim.cpu_stretch)
    sync: bool = False  # ranks in lockstep: a collective (DDP's all-reduce) ends each step's compute
    slow_rank: int = -1  # with these, one rank is a straggler:
    slow_rank_load: float = 1.0  # ... its samples' load and op times are this many times longer (input pipeline)
    slow_rank_step_ms: float = 0.0  # ... its steps take this much longer after the collective (the step)

    def native_events(self) -> int:
        per_batch = self.batch_size * (_NATIVE_PER_SAMPLE_FIXED + len(self.ops_ms)) + _NATIVE_PER_BATCH
        per_epoch = self.n_batches * per_batch + 2 + 2 * self.n_workers  # epoch and worker markers
        return per_epoch * self.epochs * self.ranks

    def original_events(self) -> int:
        per_batch = self.batch_size * (_ORIGINAL_PER_SAMPLE_FIXED + len(self.ops_ms)) + _ORIGINAL_PER_BATCH
        return self.n_batches * per_batch * self.epochs * self.ranks


def spec_for_events(n_events: int, fmt: str = "lotus", **kwargs) -> PipelineSpec:
    """A spec whose trace holds about ``n_events`` events in format ``fmt`` (``lotus`` or ``original``)."""
    spec = PipelineSpec(**kwargs)
    one = replace(spec, n_batches=1)
    per_batch = one.native_events() if fmt == "lotus" else one.original_events()
    per_batch_net = per_batch - (2 + 2 * spec.n_workers) * spec.epochs * spec.ranks if fmt == "lotus" else per_batch
    n = max(1, round(n_events / max(per_batch_net, 1)))
    return replace(spec, n_batches=n)


@dataclass
class SimEpoch:
    """Per-batch times (wall-clock ns) and per-sample durations of one simulated (rank, epoch)."""

    rank: int
    epoch: int
    worker_of: np.ndarray  # (B,) worker id
    worker_pids: list[int]
    main_pid: int
    epoch_start_ns: int
    epoch_end_ns: int
    dispatch_ns: np.ndarray
    dispatch_dur_ns: np.ndarray
    prep_start_ns: np.ndarray
    prep_dur_ns: np.ndarray
    collate_start_ns: np.ndarray
    collate_dur_ns: np.ndarray
    put_dur_ns: np.ndarray
    arrive_ns: np.ndarray
    wait_start_ns: np.ndarray
    wait_dur_ns: np.ndarray
    buffered: np.ndarray
    consumed_ns: np.ndarray
    step_dur_ns: np.ndarray
    sample_start_ns: np.ndarray  # (B, bs)
    load_dur_ns: np.ndarray  # (B, bs)
    op_dur_ns: np.ndarray  # (B, bs, n_ops)
    worker_start_ns: np.ndarray  # (W,)
    worker_end_ns: np.ndarray  # (W,)


def _draw(rng: np.random.Generator, mean_ms: float, shape, sigma: float) -> np.ndarray:
    # log-normal with the given mean
    mu = np.log(max(mean_ms, 1e-6) * 1e6) - sigma * sigma / 2
    return np.maximum(rng.lognormal(mu, sigma, size=shape), 1).astype(np.int64)


def _worker_parts(rng, spec: PipelineSpec, nb: int):
    """Per-sample load/op draws and per-batch collate/put of one epoch (uncontended durations, ns)."""
    bs, n_ops = spec.batch_size, len(spec.ops_ms)
    load = _draw(rng, spec.load_ms, (nb, bs), spec.jitter)
    ops = np.stack([_draw(rng, ms, (nb, bs), spec.jitter) for ms in spec.ops_ms.values()], axis=2) \
        if n_ops else np.zeros((nb, bs, 0), np.int64)
    if spec.straggler_every > 0:
        slow = np.arange(nb) % spec.straggler_every == spec.straggler_every - 1
        load[slow] = (load[slow] * spec.straggler_factor).astype(np.int64)
        ops[slow] = (ops[slow] * spec.straggler_factor).astype(np.int64)
    collate = _draw(rng, spec.collate_ms_per_sample * bs, nb, spec.jitter)
    put = _draw(rng, 0.05, nb, spec.jitter)
    return load, ops, collate, put


def _layout(load, ops, collate, put):
    """Sample durations, their offsets in the batch and the batch preprocessing time (ns)."""
    n_ops = ops.shape[2]
    sample_dur = load + ops.sum(axis=2) + _GAP_NS * (n_ops + 1)
    offsets = np.zeros(load.shape, np.int64)
    offsets[:, 1:] = np.cumsum(sample_dur[:, :-1] + _GAP_NS, axis=1)
    prep_dur = offsets[:, -1] + sample_dur[:, -1] + _GAP_NS + collate + _GAP_NS + put
    return sample_dur, offsets, prep_dur


def simulate(spec: PipelineSpec) -> list[SimEpoch]:
    """Run the DataLoader model (:mod:`lotus.sim`); one :class:`SimEpoch` per (rank, epoch)."""
    return list(iter_simulate(spec))


def iter_simulate(spec: PipelineSpec) -> Iterator[SimEpoch]:
    """:func:`simulate` one (rank, epoch) at a time, in that order (memory: one epoch's arrays).

    With ``spec.cpus`` set, worker durations are stretched by the CPU model of :mod:`lotus.sim`
    (``main_cpu_cores``, ``contention``, ``cpu_fraction``, ``slicing``) at its fixed point; ``cpus=None`` leaves
    them as drawn.
    ``spec.sync``: the ranks run in lockstep (:func:`_iter_lockstep`), epoch by epoch.
    """
    from lotus.sim import CpuModel, run_loader, run_with_cpus

    if spec.sync:
        yield from _iter_lockstep(spec)
        return
    rng = np.random.default_rng(spec.seed)
    pid = spec.first_pid
    nb, nw = spec.n_batches, max(spec.n_workers, 1)
    for rank in range(spec.ranks):
        main_pid = pid
        pid += 1
        t = spec.start_wall_ns + rank * 137_000  # ranks start nearly together
        for epoch in range(spec.epochs):
            d = _EpochDraws.of(rng, spec, nb, rank)
            worker_pids = list(range(pid, pid + nw))
            pid += nw
            loop = _loop_args(spec, d, t, nb, nw)
            if spec.cpus is not None:
                cpu = CpuModel(spec.main_cpu_cores, spec.contention, spec.cpu_fraction, slicing=spec.slicing)
                _, s = run_with_cpus(d.prep_dur, d.step, cpus=spec.cpus, cpu=cpu, **loop)
                d.stretch(s)
            sim = run_loader(d.prep_dur, d.step, **loop)
            ep = _sim_epoch(rank, epoch, d, sim, worker_pids, main_pid, t, loop["worker_start_ns"], d.step)
            yield ep
            t = ep.epoch_end_ns + 200_000_000


@dataclass
class _EpochDraws:
    """What one (rank, epoch) draws: per-sample load/op times, per-batch collate/put/step/dispatch."""

    load: np.ndarray
    ops: np.ndarray
    collate: np.ndarray
    put: np.ndarray
    step: np.ndarray
    disp_dur: np.ndarray
    sample_dur: np.ndarray = None
    offsets: np.ndarray = None
    prep_dur: np.ndarray = None

    @classmethod
    def of(cls, rng, spec: PipelineSpec, nb: int, rank: int) -> _EpochDraws:
        load, ops, collate, put = _worker_parts(rng, spec, nb)
        if rank == spec.slow_rank and spec.slow_rank_load != 1.0:
            load, ops = (np.rint(a * spec.slow_rank_load).astype(np.int64) for a in (load, ops))
        step = _draw(rng, spec.step_ms, nb, spec.jitter / 2)
        d = cls(load, ops, collate, put, step, _draw(rng, 0.03, nb, spec.jitter))
        d.sample_dur, d.offsets, d.prep_dur = _layout(load, ops, collate, put)
        return d

    def stretch(self, s: float) -> None:
        self.load, self.ops, self.collate, self.put = (np.rint(a * s).astype(np.int64)
                                                       for a in (self.load, self.ops, self.collate, self.put))
        self.sample_dur, self.offsets, self.prep_dur = _layout(self.load, self.ops, self.collate, self.put)


def _loop_args(spec: PipelineSpec, d: _EpochDraws, epoch_start: int, nb: int, nw: int) -> dict:
    worker_start = epoch_start + 20_000_000 + np.arange(nw) * 1_500_000  # process start-up
    return {"n_workers": nw, "prefetch_factor": spec.prefetch_factor, "dispatch_dur_ns": d.disp_dur,
            "ready_wait_ns": 1_000 + (np.arange(nb) * 7919) % 20_000, "late_wait_ns": np.full(nb, 30_000),
            "t0_ns": epoch_start + 50_000, "worker_start_ns": worker_start}


def _sim_epoch(rank, epoch, d: _EpochDraws, sim, worker_pids, main_pid, epoch_start, worker_start, step) -> SimEpoch:
    epoch_end = sim.loop_end_ns + 20_000
    worker_end = np.maximum(sim.worker_free_ns, epoch_end - 1_000_000)
    prep_start = sim.prep_start_ns
    return SimEpoch(
        rank=rank, epoch=epoch, worker_of=sim.worker_of, worker_pids=worker_pids, main_pid=main_pid,
        epoch_start_ns=int(epoch_start), epoch_end_ns=int(epoch_end), dispatch_ns=sim.dispatch_ns,
        dispatch_dur_ns=d.disp_dur, prep_start_ns=prep_start, prep_dur_ns=d.prep_dur,
        collate_start_ns=prep_start + d.offsets[:, -1] + d.sample_dur[:, -1] + _GAP_NS, collate_dur_ns=d.collate,
        put_dur_ns=d.put, arrive_ns=sim.arrive_ns, wait_start_ns=sim.wait_start_ns,
        wait_dur_ns=sim.wait_dur_ns, buffered=sim.buffered, consumed_ns=sim.consumed_ns, step_dur_ns=step,
        sample_start_ns=prep_start[:, None] + _GAP_NS + d.offsets, load_dur_ns=d.load, op_dur_ns=d.ops,
        worker_start_ns=worker_start, worker_end_ns=worker_end,
    )


def _iter_lockstep(spec: PipelineSpec) -> Iterator[SimEpoch]:
    """Ranks in lockstep (``spec.sync``): every rank's step ``i`` computes for its drawn step time, then
    waits in a collective until the last rank got there (the release is the latest hand-off plus that
    rank's compute), then (the slow rank) works ``slow_rank_step_ms`` more before it asks for the next
    batch. Epochs start together. Yields epoch by epoch, rank by rank (no CPU model)."""
    from lotus.sim import loader_loop

    if spec.cpus is not None:
        raise ValueError("sync=True simulates no CPU limit (cpus=None)")
    rng = np.random.default_rng(spec.seed)
    nb, nw, ranks = spec.n_batches, max(spec.n_workers, 1), range(spec.ranks)
    main_pids = [spec.first_pid + r for r in ranks]
    pid = spec.first_pid + spec.ranks
    extra = int(spec.slow_rank_step_ms * 1e6)
    t = spec.start_wall_ns
    for epoch in range(spec.epochs):
        draws = [_EpochDraws.of(rng, spec, nb, r) for r in ranks]
        starts = [t + r * 137_000 for r in ranks]
        args = [_loop_args(spec, draws[r], starts[r], nb, nw) for r in ranks]
        loops = [loader_loop(draws[r].prep_dur, **args[r]) for r in ranks]
        steps = np.zeros((spec.ranks, nb), np.int64)
        sims, handed = [None] * spec.ranks, [0] * spec.ranks
        for r in ranks:
            try:
                handed[r] = loops[r].send(None)
            except StopIteration as done:  # no batch at all
                sims[r] = done.value
        for i in range(nb):
            release = max(handed[r] + int(draws[r].step[i]) for r in ranks)
            for r in ranks:
                steps[r, i] = release - handed[r] + (extra if r == spec.slow_rank else 0)
                try:
                    handed[r] = loops[r].send(int(steps[r, i]))
                except StopIteration as done:
                    sims[r] = done.value
        end = 0
        for r in ranks:
            worker_pids = list(range(pid, pid + nw))
            pid += nw
            ep = _sim_epoch(r, epoch, draws[r], sims[r], worker_pids, main_pids[r], starts[r],
                            args[r]["worker_start_ns"], steps[r])
            end = max(end, ep.epoch_end_ns)
            yield ep
        t = end + 200_000_000


# -- lotus's own format -----------------------------------------------------------------------------
