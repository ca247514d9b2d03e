"""Typed results of :mod:`lotus.model`: fitted parameters, run summaries and predictions (units in names).

Durations of worker work (``*_ms`` of ops, collation, per-batch overhead) are *uncontended*: the time
one worker takes when it has a CPU to itself, after the fit removed the CPU sharing of the traced run
(see :mod:`lotus.model.fitting`). The measured arrays the simulator resamples live in :class:`Measured`,
which is not part of the JSON (``PipelineModel.to_dict``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from lotus.model.prediction import BOTTLENECKS, Prediction


@dataclass(frozen=True)
class Dist:
    """A duration distribution, summarised (ms). ``count`` 0: nothing measured."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None

    @classmethod
    def of_ns(cls, values_ns) -> Dist:
        a = np.asarray(values_ns, dtype=np.float64)
        a = a[np.isfinite(a)]
        if a.size == 0:
            return cls(0, None, None, None, None)
        p50, p90, p99 = np.percentile(a, [50, 90, 99]) / 1e6
        return cls(int(a.size), float(a.mean()) / 1e6, float(p50), float(p90), float(p99))


@dataclass
class RunSummary:
    """One traced run the model was fitted on: its configuration and what it measured."""

    name: str
    num_workers: int
    cpus: float | None  # CPUs available per rank (None: unknown)
    batch_size: int
    prefetch_factor: int
    ranks: int
    batches: int
    cache_state: str  # "warm" (also the assumption for an unlabelled run) or "cold"
    samples_per_s: float | None  # measured, steady state, per rank
    wait_share: float | None  # measured
    steady_wait_share: float | None  # measured, without the first batch of each epoch (start-up)
    busy_workers: float  # mean number of workers preparing a batch
    sample_ms: float | None  # mean time of one item as measured (wall, contended)
    cpu_stretch: float = 1.0  # fitted: measured / uncontended worker time
    dataset_len: int | None = None  # from the loader description
    sampler: str | None = None
    samples_per_s_ci95: tuple[float, float] | None = None  # 95% interval of samples_per_s
    samples_per_s_note: str | None = None  # the measure's note (an interval wider than the target, a short window)
    # the scheduler's view (format >= 4 on Linux; None before): sums over the batches that carry it
    sched_prep_ns: float | None = None  # fetch wall time of those batches
    sched_runq_ns: float | None = None  # of it, runnable but waiting for a CPU
    sched_cpu_ns: float | None = None  # of it, on a CPU
    main_cpu_cores: float | None = None  # the main process's CPU use (all threads), cores, over the run's batches
    # storage (format >= 5 on Linux; None before or when nothing was read from a block device)
    disk_bytes_per_sample: float | None = None  # bytes the workers read from storage a sample (cache misses)
    io_wait_share: float | None = None  # of the fetches' time, off a CPU in batches that read from storage
    batch_bytes: float | None = None  # a collated batch's tensors, bytes (format >= 6; median of its records)


@dataclass
class Measured:
    """Per-batch arrays of the fitted runs (uncontended ns) that the simulator resamples."""

    n: np.ndarray  # samples per batch
    items_ns: np.ndarray  # sum of the batch's per-item work (load + transforms + item overhead)
    load_ns: np.ndarray  # sum of the batch's load time
    cold_reads: np.ndarray  # per batch: reads counted as cold (first reads of a cold-looking epoch)
    collate_ns: np.ndarray
    other_ns: np.ndarray  # fetch - items - collate: put, gaps, fetch overhead
    step_ns: dict[int, np.ndarray]  # the loop's time per batch, by batch size
    handoff_ns: np.ndarray  # batch there -> handed to the loop (incl. dispatching the next index)
    dispatch_ns: np.ndarray
    pin_ns: np.ndarray | None
    io_ns: np.ndarray | None = None  # per batch: off a CPU reading from storage (lotus.model.measures.storage_waits)
    io_workers: np.ndarray | None = None  # per batch: the workers (>= 1 readers) of the run it came from
    # per batch, runs without workers: the loop thread's run-queue delay in the fetch (ns; lotus.model.observation)
    loop_runq_ns: np.ndarray | None = None


@dataclass
class PipelineModel:
    """The fitted throughput model of one job's input pipeline and training loop.

    ``predict`` (see :func:`lotus.model.engine.predict`) answers for other workers, CPUs, batch sizes,
    cache hit rates and prefetch factors; ``missing`` lists what the traces could not tell (a prediction
    that needs it is None with a reason).
    """

    op_ms: dict[str, Dist]  # per call, uncontended: load, each transform op, collate (per batch)
    sample_ms: Dist  # one whole item (load + transforms + overhead), uncontended
    warm_load_ms: float | None  # mean load per sample from the page cache
    cold_load_ms: float | None  # mean load per sample from disk (cold probe, io model or re-reads)
    cold_source: str | None  # "cold run", "io_bytes_per_s", "re-reads in the run", or None
    io_bytes_per_s: float | None
    bytes_per_sample: float | None
    collate_ms_per_sample: float
    collate_ms_per_batch: float  # fixed part of collation (0 unless batch sizes varied)
    worker_batch_overhead_ms: float  # mean per batch: fetch - items - collate
    step_ms: dict[int, Dist]  # the loop's time per batch, by batch size
    step_source: str | None  # "gpu_step", "step", "next request" or None (unknown)
    handoff_ms: Dist
    dispatch_ms: Dist
    pin_ms: Dist | None
    start_latency_ms: float  # index dispatched -> worker starts
    arrive_latency_ms: float  # worker put -> main process receives
    free_gap_ms: float  # a worker between two batches
    contention: float  # slowdown per extra worker running at once (see lotus.sim.cpu_stretch)
    contention_identified: bool  # True when runs at different concurrency fixed it
    cpu_fraction: float  # share of worker time that needs a CPU (1: all of it, the assumption)
    cpu_fraction_identified: bool  # True when runs at different CPU shares fixed it
    main_cpu_cores: float  # CPU the main process uses (assumed, or measured: main_cpu_measured)
    traced: RunSummary  # the first run: defaults for predict
    epoch_batches: int | None = None  # batches per epoch at the traced batch size (None: no restart seen)
    # an epoch's restart (previous epoch's last hand-off -> first dispatch): without workers, and per worker
    # (fresh worker processes started one after the other); see lotus.model.fitting._epochs
    epoch_gap0_ms: float | None = None
    epoch_gap_per_worker_ms: float | None = None
    epoch_boot_ms: float = 0.0  # a fresh worker's start before its first fetch (beyond start_latency_ms)
    runs: list[RunSummary] = field(default_factory=list)
    base_state: str = "warm"  # cache state of the per-batch arrays the simulator resamples
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: Measured | None = field(default=None, repr=False)
    cpu_capacity: float = 1.0  # CPUs' worth of work one CPU did in the runs (> 1: fewer runnable than assumed)
    other_cpus: float = 0.0  # other work runnable on the runs' CPUs, in CPUs (from their run-queue delays)
    # extra CPU work per unit of time-slicing beyond one runnable a CPU (lotus.sim.cpu_stretch): fitted only
    # from runs at two levels of it (both beyond the CPUs, by >= SLICING_SPAN); else 0
    slicing: float = 0.0
    slicing_identified: bool = False  # True when runs at two levels of it could fit it (or it was given)
    # the main process as one server of the hand-offs: its time per batch (ms) at every worker count, from the
    # runs' arrive latency and batch rate (lotus.model.handoff); None: the arrive latency is taken as fixed
    handoff_service_ms: float | None = None
    # the server's time per hand-off from a worker preparing its next batch meanwhile (ms), beyond the above;
    # scaled by lotus.model.handoff.busy_share at each worker count
    handoff_busy_ms: float = 0.0
    # a hand-off from a worker that goes on to its next batch(es) takes this share of what it goes straight on to
    # prepare (it holds the interpreter lock its resource-sharer thread needs; measures.busy_handoff), simulated per
    # batch (lotus.sim.Latencies.busy_share); 0: not told apart (every hand-off as arrive_latency_ms)
    handoff_busy_share: float = 0.0
    main_cpu_measured: bool = False  # main_cpu_cores measured by the trace (main_cpu events)
    # the time to read one of the dataset's files with N readers at once (ms; any unit: only ratios are used),
    # measured by reading them (lotus.profile.diskprobe via lotus.model.storage); empty: storage as traced
    io_scale: dict[int, float] = field(default_factory=dict)
    # the extra ns a byte of a batch costs on the worker path against the main process's (lotus.profile.shmprobe):
    # (a worker's collation into fresh shared memory, the main process's first touch of it); measured by whatif
    # for a num_workers=0 trace predicting workers; None: not measured (the worker path taken as free)
    shm_ns_per_byte: tuple[float, float] | None = None

    def io_factor(self, num_workers: int) -> float:
        """The time to read a file with ``num_workers`` readers (interpolated over the replayed counts, held
        flat beyond them; 1 when none was replayed): a batch traced at ``w`` workers spends
        ``io_factor(n) / io_factor(w)`` times its storage time at ``n``."""
        if not self.io_scale:
            return 1.0
        ws = sorted(self.io_scale)
        return float(np.interp(max(num_workers, 1), ws, [self.io_scale[w] for w in ws]))

    @property
    def without_workers(self) -> bool:
        """Every run was traced with num_workers=0 (its batches prepared by the loop's thread)."""
        return not any(r.num_workers > 0 for r in (self.runs or [self.traced]))

    def worker_path_ns(self, num_workers: int, batch_size: int) -> tuple[float, float]:
        """(a worker's extra collation time, the main process's first touch) a batch of ``batch_size`` costs
        with ``num_workers`` workers where every run was traced without workers (ns); (0, 0) where the runs
        measured the worker path themselves, or nothing priced it (``shm_ns_per_byte``, ``batch_bytes``)."""
        t = self.traced
        if num_workers <= 0 or not self.shm_ns_per_byte or not t.batch_bytes or not self.without_workers:
            return 0.0, 0.0
        nbytes = t.batch_bytes * batch_size / max(t.batch_size, 1)
        return nbytes * self.shm_ns_per_byte[0], nbytes * self.shm_ns_per_byte[1]

    def predict(self, num_workers: int, cpus: float | None, batch_size: int | None = None,
                cache_hit_rate: float | None = None, prefetch_factor: int | None = None, **kwargs) -> Prediction:
        from lotus.model.engine import predict

        return predict(self, num_workers, cpus, batch_size=batch_size, cache_hit_rate=cache_hit_rate,
                       prefetch_factor=prefetch_factor, **kwargs)

    def epoch_gap_ms(self, num_workers: int) -> float | None:
        """An epoch's restart gap (ms) with ``num_workers`` workers; None when no run showed it."""
        if num_workers <= 0:
            return self.epoch_gap0_ms if self.epoch_gap0_ms is not None else (
                0.0 if self.epoch_gap_per_worker_ms is not None else None)
        if self.epoch_gap_per_worker_ms is None:
            return None
        return (self.epoch_gap0_ms or 0.0) + self.epoch_gap_per_worker_ms * num_workers

    @property
    def cpu(self):
        """The fitted :class:`lotus.sim.CpuModel`."""
        from lotus.sim import CpuModel

        return CpuModel(self.main_cpu_cores, self.contention, self.cpu_fraction, self.cpu_capacity,
                        self.main_cpu_measured, self.other_cpus, self.slicing)

    @property
    def cold_extra_ms(self) -> float | None:
        """Extra time per sample read from disk instead of the page cache (ms), if known."""
        if self.cold_load_ms is None or self.warm_load_ms is None:
            return None
        return max(self.cold_load_ms - self.warm_load_ms, 0.0)

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "measured"}
        out["step_ms"] = {str(k): v for k, v in out["step_ms"].items()}
        out["cold_extra_ms"] = self.cold_extra_ms
        return out


__all__ = ["BOTTLENECKS", "Dist", "Measured", "PipelineModel", "Prediction", "RunSummary"]
