"""``fit``: traced runs of one job -> :class:`~lotus.model.params.PipelineModel`.

One run or several (probes of the same job at other worker/CPU counts, batch sizes, or with a cold page
cache, e.g. :func:`lotus.launch.launch` probes: pass their ``trace_dir`` or the ``Probe`` itself).

What one run identifies, and what it cannot:

* per-item, per-op, collation and per-batch worker costs, as *wall* times at the run's concurrency.
  The fit turns them into uncontended costs with the CPU model of :func:`lotus.sim.cpu_stretch`:
  the run's mean number of busy workers (fetch time / epoch span) and its CPUs give the processor-sharing
  stretch ``max(1, (busy + main_cpu_cores) / (capacity * cpus))`` that is divided out. Traces of format
  >= 4 on Linux carry the scheduler's view (each fetch's run-queue delay and CPU time, the main process's
  CPU use): the CPU fraction, the main process's use and the capacity are then measured
  (:func:`lotus.model.sched.sched_cpu`); before, ``main_cpu_cores`` (default 1, while the loop is not waiting) and a
  capacity of 1 are assumptions.
* it cannot tell how per-item time grows with the number of workers running at once *below* the CPU
  count (shared caches, memory bandwidth, hyper-threads): ``contention`` stays 0 (linear scaling, an
  optimistic bound); nor whether worker time is CPU time or waiting (I/O, sleep, a remote store):
  ``cpu_fraction`` stays 1. Runs at other worker counts or CPU counts fix them: the parameters that
  make every run's per-item time the same uncontended time (:func:`_fit_cpu`).
* the step time at the traced batch size only; other batch sizes need runs at them (two or more sizes:
  the mean step is interpolated linearly in the batch size).
* load costs in the run's page-cache state only: an unlabelled run is taken as warm (said in ``notes``).
  The cold cost comes from a run labelled ``cache_state="cold"``, from ``io_bytes_per_s`` with
  ``bytes_per_sample``, or from the run itself when first reads of samples are much slower (> 25 %)
  than later re-reads of the same samples.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import numpy as np

from lotus.errors import InputError
from lotus.model.batchsource import TableRun
from lotus.model.observation import MODEL_COLUMNS, Observation, RunTrace, observe
from lotus.model.params import Dist, Measured, PipelineModel
from lotus.model.sched import main_busy as _main_busy
from lotus.model.sched import sched_cpu
from lotus.model.streams import dist_of
from lotus.sim import CpuModel

_log = logging.getLogger("lotus.model")
REREAD_RATIO = 1.25  # first reads this much slower than re-reads: the first reads were cold
MIN_READS = 50


def load_run(path: str | os.PathLike, cache_state: str | None = None, columns: list[str] | None = None) -> RunTrace:
    """The :class:`RunTrace` of the run at ``path`` (one run directory). A run whose trace files exceed
    the scan threshold is read by the out-of-core engine, as the analyses read it
    (:func:`lotus.analysis.runs.load_config` with ``engine="auto"``, ``$LOTUS_ENGINE``): its events hold no
    per-sample events, which :func:`~lotus.model.observation.observe` then reads from the files in chunks
    (:mod:`lotus.model.scandetail`; the scan keeps no per-op statistics: the fit does not read them);
    the batches DataFrame is built whole (O(batches)); ``columns`` (a run read only to be fitted:
    :data:`~lotus.model.observation.MODEL_COLUMNS`): a scanned run stays the engine's compact table
    (:class:`~lotus.model.batchsource.TableRun`: its ``batches``, the DataFrame of only those columns, made
    when asked; the fit reads a few columns at a time)."""
    from lotus.analysis.runs import load_config

    cfg = load_config(path, engine="auto", op_stats=False)
    if columns is not None and cfg.table is not None and not cfg.table.partial:
        return TableRun(cfg.events, cfg.table, columns, cfg.loaders, name=cfg.name, cache_state=cache_state)
    return RunTrace(cfg.events, cfg.batches, cfg.loaders, name=cfg.name, cache_state=cache_state)


def as_run(obj) -> RunTrace:
    """A RunTrace from a RunTrace, an analysis Config, a launcher Probe (``trace_dir``) or a path."""
    if isinstance(obj, RunTrace):
        return obj
    if hasattr(obj, "events") and hasattr(obj, "batches"):
        return RunTrace(obj.events, obj.batches, getattr(obj, "loaders", {}) or {}, name=getattr(obj, "name", "run"))
    if hasattr(obj, "trace_dir"):  # read only to be fitted: the columns the fit reads
        return load_run(obj.trace_dir, columns=MODEL_COLUMNS)
    if isinstance(obj, str | os.PathLike):
        return load_run(obj, columns=MODEL_COLUMNS)
    raise TypeError(f"cannot fit a model on {type(obj).__name__}")


def fit(runs, *, main_cpu_cores: float = 1.0, io_bytes_per_s: float | None = None,
        bytes_per_sample: float | None = None, contention: float | None = None,
        cpu_fraction: float | None = None, slicing: float | None = None, sched: bool = True) -> PipelineModel:
    """Fit the model on one run or several runs of the same job (see the module doc).

    ``contention``, ``cpu_fraction`` and ``slicing`` fix those parameters instead of fitting them (default:
    fitted when the runs identify them, else 0, 1 and 0). ``sched=False``: leave the scheduler's view out (the
    assumptions of traces without it; for comparisons).
    """
    items = list(runs) if isinstance(runs, list | tuple) else [runs]
    if not items:
        raise InputError("no run to fit the model on")
    obs = [_observed(as_run(r)) for r in items]
    warm = [o for o in obs if o.summary.cache_state != "cold"]
    cold = [o for o in obs if o.summary.cache_state == "cold"]
    base = warm or cold
    notes = [n for o in obs for n in o.notes]
    missing = list(dict.fromkeys(m for o in base for m in o.missing))
    template, phi_measured, sched_notes = sched_cpu(base, main_cpu_cores, cpu_fraction) if sched \
        else (CpuModel(main_cpu_cores), None, [])
    notes += sched_notes
    cpu, alpha_known, phi_known, slice_known = _fit_cpu(base, template, contention,
                                           cpu_fraction if phi_measured is None else phi_measured, slicing)
    phi_known = phi_known or phi_measured is not None
    for o in obs:
        s = o.summary
        s.cpu_stretch = cpu.stretch(s.busy_workers, s.cpus, _main_busy(s)) if s.num_workers > 0 else 1.0
    own = [o.levels for o in obs if o.summary.num_workers > 0 and o.summary.sample_ms]
    if not alpha_known:
        notes.append("one concurrency level only: workers assumed to scale linearly up to the CPUs "
                     "(contention 0); a probe at another worker count fits it")
    elif contention is None and len(own) == 1 and own[0]:
        notes.append(f"contention {cpu.contention:.3g} from the run's own levels of workers busy at once "
                     f"({own[0][0][0]:.1f}-{own[0][-1][0]:.1f}); a probe at another worker count checks it "
                     "beyond them")
    if cpu.slicing > 0:
        notes.append(f"time-slicing: +{cpu.slicing:.0%} CPU work per extra runnable a CPU, fitted on runs at "
                     "several levels of it (caches refilled at every turn)")
    if not phi_known:
        notes.append("worker time taken as CPU time (cpu_fraction 1): a probe at another CPU count tells how "
                     "much of it waits instead (I/O, sleep)")
    if any(o.summary.cpus is None for o in obs):
        notes.append("CPUs of a run unknown: assumed enough for its workers (no CPU sharing removed)")
    if not warm:
        notes.append("only cold-cache runs: costs are those of reads from disk")
    elif all(o.summary.cache_state == "warm" for o in warm) and not cold:
        notes.append("the traced run is taken as read from the page cache (warm)")

    def pool(get, runs_=base):
        return _joined([_unstretched(get(o), o.summary.cpu_stretch) for o in runs_])

    n = _joined([o.n for o in base])
    load_per = pool(lambda o: o.load_ns)
    items_ = pool(lambda o: o.items_ns)
    first = _joined([o.first_reads for o in base])
    warm_load = float(load_per.sum() / n.sum()) / 1e6 if load_per.sum() > 0 else None
    cold_load, cold_source = None, None
    cold_reads = np.zeros(len(n))
    if cold and warm:
        c_load = pool(lambda o: o.load_ns, cold)
        cold_load = float(c_load.sum() / _joined([o.n for o in cold]).sum()) / 1e6
        cold_source = "cold run"
    elif io_bytes_per_s and bytes_per_sample and warm:
        cold_load = (warm_load or 0.0) + bytes_per_sample / io_bytes_per_s * 1e3
        cold_source = "io_bytes_per_s"
    elif warm:
        rr = _reread(warm)
        if rr is not None:
            first_ms, reread_ms = rr
            warm_load, cold_load, cold_source = reread_ms, first_ms, "re-reads in the run"
            cold_reads = first
            notes.append(f"first reads of samples took {first_ms:.3g} ms, re-reads {reread_ms:.3g} ms: the first "
                         "reads were taken as cold")
    if cold_load is None:
        missing.append("the cold (disk) read cost: a cold-cache probe, or io_bytes_per_s with bytes_per_sample")
    collate = pool(lambda o: o.collate_ns)
    c_fixed, c_per = _collate_law(n, collate)
    steps: dict[int, list[np.ndarray]] = {}
    for o in base:
        if o.step_ns is not None:
            steps.setdefault(o.summary.batch_size, []).append(o.step_ns)
    step_ns = {bs: _joined(v) for bs, v in sorted(steps.items())}
    handoff = _joined([o.handoff_ns for o in base if o.handoff_ns is not None])
    dispatch = _joined([o.dispatch_ns for o in base])
    pins = [o.pin_ns for o in base if o.pin_ns is not None]
    measured = Measured(
        n=n, items_ns=items_, load_ns=load_per, cold_reads=cold_reads, collate_ns=collate,
        other_ns=pool(lambda o: o.other_ns), step_ns=step_ns, handoff_ns=handoff, dispatch_ns=dispatch,
        pin_ns=_joined(pins) if pins else None,
        io_ns=_joined([o.io_ns if o.io_ns is not None else np.zeros(len(o.n)) for o in base])
        if any(o.io_ns is not None for o in base) else None,
        io_workers=_joined([np.full(len(o.n), max(o.summary.num_workers, 1), np.float64) for o in base])
        if any(o.io_ns is not None for o in base) else None,
        loop_runq_ns=_joined([o.loop_runq_ns for o in base])
        if base and all(o.loop_runq_ns is not None for o in base) else None)
    op_ms = {}
    for name in dict.fromkeys(k for o in base for k in o.op_ns):  # durations: arrays or streams (scanned runs)
        op_ms[name] = dist_of([(o.op_ns.get(name), o.summary.cpu_stretch) for o in base])
    src = next((o.step_source for o in base if o.step_source), None)
    epoch_batches, epoch_gap_per_worker_ms, epoch_gap0_ms, epoch_boot_ms = _epochs(base, obs[0].summary.batch_size)
    from lotus.model.handoff_fit import fitted_busy_queue, service_parts

    handoff = service_parts(base)
    arrive_ms = _median_of(base, "arrive_latency_ns", 60_000) / 1e6
    if handoff[2] > 0:  # busy workers' hand-offs simulated per batch: the rest of the batches' latency
        arrive_ms = float(np.median([o.busy_handoff[2] for o in base if o.busy_handoff])) / 1e6
    _log.debug("model of %d run(s): contention %.3g, cpu_fraction %.3g, cold load %s ms", len(obs), cpu.contention,
               cpu.cpu_fraction, cold_load)
    model = PipelineModel(
        op_ms=op_ms, sample_ms=Dist.of_ns(items_ / n), warm_load_ms=warm_load, cold_load_ms=cold_load,
        cold_source=cold_source, io_bytes_per_s=io_bytes_per_s, bytes_per_sample=bytes_per_sample,
        collate_ms_per_sample=c_per / 1e6, collate_ms_per_batch=c_fixed / 1e6,
        worker_batch_overhead_ms=float(measured.other_ns.mean()) / 1e6,
        step_ms={bs: Dist.of_ns(v) for bs, v in step_ns.items()}, step_source=src,
        handoff_ms=Dist.of_ns(handoff), dispatch_ms=Dist.of_ns(dispatch),
        pin_ms=Dist.of_ns(measured.pin_ns) if measured.pin_ns is not None else None,
        start_latency_ms=_median_of(base, "start_latency_ns", 50_000) / 1e6,
        arrive_latency_ms=arrive_ms, handoff_service_ms=handoff[0], handoff_busy_ms=handoff[1],
        handoff_busy_share=handoff[2],
        free_gap_ms=_median_of(base, "free_gap_ns", 5_000) / 1e6,
        contention=cpu.contention, contention_identified=alpha_known, cpu_fraction=cpu.cpu_fraction,
        cpu_fraction_identified=phi_known, main_cpu_cores=cpu.main_cpu_cores,
        cpu_capacity=cpu.capacity, main_cpu_measured=cpu.main_measured, other_cpus=cpu.other_cpus,
        slicing=cpu.slicing, slicing_identified=slice_known,
        traced=obs[0].summary, epoch_batches=epoch_batches,
        epoch_gap_per_worker_ms=epoch_gap_per_worker_ms, epoch_gap0_ms=epoch_gap0_ms,
        epoch_boot_ms=epoch_boot_ms,
        runs=[o.summary for o in obs], base_state="warm" if warm else "cold",
        missing=missing, notes=list(dict.fromkeys(notes)), measured=measured)
    if model.handoff_busy_share > 0:  # busy hand-offs per batch: the queue they also make, fitted by simulation
        model.handoff_busy_ms = fitted_busy_queue(model, base)
    return model


def _unstretched(a: np.ndarray, stretch: float) -> np.ndarray:
    """``a / stretch``: ``a`` itself where the stretch is 1 (the same values, no copy)."""
    return a if stretch == 1.0 else a / stretch


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``: the one part itself, not a copy (the fit's arrays are never written)."""
    if len(parts) == 1 and parts[0].dtype == np.float64:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0)


def _observed(run: RunTrace) -> Observation:
    """The run's observation, read once per RunTrace (leave-one-probe-out checks refit the same runs many
    times); each fit gets its own summary, which it annotates."""
    from dataclasses import replace

    cached = run.__dict__.get("_observation")
    if cached is None:
        cached = observe(run)
        run.__dict__["_observation"] = cached
    return replace(cached, summary=replace(cached.summary))


def forget_observation(run) -> None:
    """Drop the observation :func:`fit` keeps with ``run`` (for refits of the same run): a caller that fits
    it once frees the per-batch arrays the model does not hold."""
    if isinstance(run, RunTrace):
        run.__dict__.pop("_observation", None)


def _epochs(obs: list[Observation], traced_bs: int) -> tuple[int | None, float | None, float | None, float]:
    """Batches per epoch at ``traced_bs`` (the runs' samples per epoch); an epoch's restart gap (ms) without
    workers and per worker (torch starts a fresh set of worker processes one after the other each epoch
    unless they persist: ``gap = base + per_worker * num_workers``, the base from runs without workers, else
    0; the per-worker part by least squares over the runs' worker counts); the median worker boot beyond
    the steady start latency (ms). None where no run showed two epochs."""
    per = [o.epoch_batches * o.summary.batch_size for o in obs if o.epoch_batches]
    if not per:
        return None, None, None, 0.0

    def gap(o):
        return float(np.median(o.epoch_gap_ns)) / 1e6 if o.epoch_batches and o.epoch_gap_ns.size else None

    g0s = [g for o in obs if o.summary.num_workers == 0 and (g := gap(o)) is not None]
    base = float(np.median(g0s)) if g0s else None
    pts = [(o.summary.num_workers, g) for o in obs if o.summary.num_workers > 0 and (g := gap(o)) is not None]
    per_worker = None
    if pts:
        nw = np.array([p[0] for p in pts], np.float64)
        y = np.array([p[1] for p in pts]) - (base or 0.0)
        per_worker = max(float((nw * y).sum() / (nw * nw).sum()), 0.0)
    with_w = [o for o in obs if o.summary.num_workers > 0]
    boots = np.concatenate([o.epoch_boot_ns for o in with_w] or [np.zeros(0)])
    start = _median_of(obs, "start_latency_ns", 50_000)
    boot = max(float(np.median(boots)) - start, 0.0) / 1e6 if boots.size else 0.0
    return max(1, round(float(np.median(per)) / traced_bs)), per_worker, base, boot


def _median_of(obs: list[Observation], attr: str, default: float) -> float:
    vals = [getattr(o, attr) for o in obs if getattr(o, attr) is not None]
    return float(np.median(vals)) if vals else float(default)


WITHIN_RUN_SPAN = 0.3  # workers at once: the least span of one run's own levels that fits contention
SLICING_SPAN = 0.5  # runnable a CPU: the least span of the runs' time-slicing (beyond 1) that fits it


def _fit_cpu(obs: list[Observation], template: CpuModel, contention: float | None,
             cpu_fraction: float | None, slicing: float | None = None) -> tuple[CpuModel, bool, bool, bool]:
    """Contention and CPU fraction that make the runs' per-item times one uncontended time.

    Each run gives its mean per-item wall time ``y`` at its busy workers and CPUs; for a candidate
    (contention, cpu_fraction) ``y / stretch`` should be the same for all runs: the candidate with the
    smallest spread of ``log(y / stretch)`` wins (grid search). A parameter is searched only when the runs
    can tell it: contention when their workers running at once differ by >= 0.5, the CPU fraction when
    their CPU sharing differs by >= 20 %; with two runs only one of them (the CPU fraction first). One run
    with workers: its own levels of workers busy at once (:func:`lotus.model.measures.concurrency_levels`)
    stand for runs, for contention only (its CPUs are the same at every level), when they span
    :data:`WITHIN_RUN_SPAN` workers.
    """
    runs = [(o.summary.busy_workers, o.summary.cpus, _main_busy(o.summary), o.summary.sample_ms) for o in obs
            if o.summary.num_workers > 0 and o.summary.sample_ms]
    one = [o for o in obs if o.summary.num_workers > 0 and o.summary.sample_ms]
    within = len(runs) == 1 and contention is None and bool(one[0].levels)
    if within:  # one run: its own levels of workers busy at once stand for runs at other worker counts
        s = one[0].summary
        runs = [(c, s.cpus, _main_busy(s), ms) for c, ms, _ in one[0].levels]
    full = template
    ps = [full.stretch(b, c, m) for b, c, m, _ in runs]
    running = [r[0] / p for r, p in zip(runs, ps, strict=True)]
    can_phi = len(runs) >= 2 and max(ps) - min(ps) >= 0.2 and not within  # one run: the same CPUs at every level
    can_alpha = len(runs) >= 2 and max(running) - min(running) >= (WITHIN_RUN_SPAN if within else 0.5)
    if len(runs) == 2 and can_phi:
        can_alpha = False
    beyond = [max(p - 1.0, 0.0) for p in ps]
    # time-slicing's own cost: runs beyond the CPUs at two levels, with at most one other parameter searched
    # beside it (the CPU fraction measured or fixed; else three runs, and the contention not searched): a CPU
    # fraction below 1 and a cost of slicing trade off against each other on two runs, and three parameters
    # on a few runs are neither identified nor cheap (41 x 201 x 101 candidates a fit)
    free = (cpu_fraction is None and can_phi) + (contention is None and can_alpha)
    can_slice = not within and len(runs) >= 2 and slicing is None and max(beyond) - min(beyond) >= SLICING_SPAN \
        and (cpu_fraction is not None or len(runs) >= 3) and free <= 1
    phis = [cpu_fraction] if cpu_fraction is not None else (np.linspace(0, 1, 41) if can_phi else [1.0])
    alphas = [contention] if contention is not None else (np.linspace(0, 1, 201) if can_alpha else [0.0])
    slices = np.linspace(0, 0.5, 101) if can_slice else [slicing or 0.0]
    if len(phis) * len(alphas) * len(slices) == 1:
        return replace(template, contention=float(alphas[0]), cpu_fraction=float(phis[0]),
                       slicing=float(slices[0])), contention is not None, cpu_fraction is not None, \
            slicing is not None
    y = np.log([r[3] for r in runs])
    best, best_loss = None, np.inf
    for phi in phis:
        for alpha in alphas:
            for sl in slices:
                cpu = replace(template, contention=float(alpha), cpu_fraction=float(phi), slicing=float(sl))
                u = y - np.log([cpu.stretch(b, c, m) for b, c, m, _ in runs])
                loss = float(np.var(u)) + 1e-9 * (abs(1 - phi) + alpha + sl)  # ties: the default assumptions
                if loss < best_loss:
                    best, best_loss = cpu, loss
    return best, can_alpha or contention is not None, can_phi or cpu_fraction is not None, \
        can_slice or slicing is not None


def _collate_law(n: np.ndarray, collate: np.ndarray) -> tuple[float, float]:
    """Collation = fixed + per_sample * n (ns): fixed part only when batch sizes varied enough."""
    if collate.sum() <= 0:
        return 0.0, 0.0
    sizes, counts = np.unique(n, return_counts=True)
    if (counts >= 3).sum() >= 2 and sizes.max() >= 1.5 * sizes.min():
        per, fixed = np.polyfit(n, collate, 1)
        if fixed >= 0 and per >= 0:
            return float(fixed), float(per)
    return 0.0, float(collate.sum() / n.sum())


def _reread(obs: list[Observation]) -> tuple[float, float] | None:
    """(first-read ms, re-read ms) per load when first reads were clearly slower, else None."""
    f_sum = f_n = r_sum = r_n = 0.0
    for o in obs:
        if o.reread is None:
            continue
        first, re, nf, nr = o.reread
        f_sum += first * nf / o.summary.cpu_stretch
        r_sum += re * nr / o.summary.cpu_stretch
        f_n += nf
        r_n += nr
    if f_n < MIN_READS or r_n < MIN_READS:
        return None
    first, re = f_sum / f_n / 1e6, r_sum / r_n / 1e6
    return (first, re) if first > REREAD_RATIO * re else None


__all__ = ["as_run", "fit", "forget_observation", "load_run"]
