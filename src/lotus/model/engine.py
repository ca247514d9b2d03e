"""``predict``: a fitted model + a configuration -> :class:`~lotus.model.params.Prediction`.

The engine is the simulator of :mod:`lotus.sim` fed with resampled measurements, so that variance
and heavy tails (a slow batch holds up the ones behind it under in-order delivery) shape the answer,
not only means:

* batch preparation: the measured batches in their recorded order, from a random offset, wrapping
  around (uncontended per-item work, collation, worker overhead): a circular block bootstrap that keeps
  the order of slow and fast batches (periodic stragglers, big samples in a sequential dataset). For
  another batch size ``B'``, ``ceil(B'/B)`` consecutive batches are summed and their item work scaled
  to ``B'`` items; collation follows the fitted law ``fixed + per_sample * B'``.
* cache hit rate ``h``: each item of a batch misses with probability ``1 - h`` (binomial per batch) and
  a miss costs ``cold_load_ms - warm_load_ms`` more (fewer, from a cold base). With ``io_bytes_per_s``
  and ``bytes_per_sample`` the misses also share the disk: ``rate <= io_bytes_per_s / ((1-h) * bytes)``.
* storage: where the traces say how long each fetch waited on reads from storage (format >= 5) and the
  dataset's files were read at other numbers of readers (:mod:`lotus.model.storage`), that time is scaled
  by what the storage gave N readers against the traced workers.
* the loop's step: the measured sequence from a random offset as well; hand-off, dispatch and pinning
  drawn at random from the measured ones.
* CPUs: worker work stretched at the fixed point of :func:`lotus.sim.cpu_stretch`.

``n_batches`` batches are simulated with a fixed seed (common random numbers across configurations);
the first ``2 * in flight`` are the ramp and left out of the rate and wait share.

``model`` is a :class:`lotus.model.params.PipelineModel` everywhere here (not imported: the class's
``predict`` calls this module, which imports nothing of it: no cycle, even for type checkers).
"""

from __future__ import annotations

import math

import numpy as np

from lotus.model.prediction import Prediction
from lotus.sim import Latencies, run_with_cpus

FINE_WAIT = 0.05  # a wait share below this is "the loop keeps the pace": the step is the bottleneck


def _step_at(model, bs: int) -> tuple[np.ndarray | None, str | None]:
    steps = model.measured.step_ns if model.measured else {}
    if not steps:
        return None, "the loop's step time is unknown (the run has no step, wait or gpu_step events)"
    if bs in steps:
        return steps[bs], None
    if len(steps) < 2:
        (known,) = steps
        return None, (f"the step time at batch size {bs} is unknown: the runs have batch size {known} only "
                      f"(probe batch size {bs}, or a second size to interpolate)")
    sizes = np.array(sorted(steps), dtype=np.float64)
    means = np.array([steps[int(s)].mean() for s in sizes])
    slope, icpt = np.polyfit(sizes, means, 1)
    nearest = int(sizes[np.argmin(np.abs(sizes - bs))])
    target = icpt + slope * bs
    if target <= 0:
        return None, f"the step time at batch size {bs} extrapolates to <= 0"
    return steps[nearest] * (target / steps[nearest].mean()), None


def _prep_ns(model, bs: int, hit: float | None, rng, n: int, nw: int):
    """Uncontended preparation time per batch (ns) and the mean per-item parts (for naming the bottleneck)."""
    m = model.measured
    traced_bs = max(int(np.median(m.n)), 1)
    k = max(1, math.ceil(bs / traced_bs))
    start = rng.integers(0, len(m.n)) + np.arange(n) * k  # the measured sequence, from a random offset
    idx = (start[:, None] + np.arange(k)[None, :]) % len(m.n)
    nn = m.n[idx].sum(axis=1)
    scale = bs / nn
    items = m.items_ns[idx].sum(axis=1) * scale
    extra_ms = model.cold_extra_ms
    cold_part = 0.0
    if hit is not None:
        extra = (extra_ms or 0.0) * 1e6
        if model.base_state == "warm":
            items = items - m.cold_reads[idx].sum(axis=1) * scale * extra  # the run's own cold first reads
            misses = rng.binomial(bs, min(max(1.0 - hit, 0.0), 1.0), size=n)
            items = items + misses * extra
        else:
            items = np.maximum(items - rng.binomial(bs, min(max(hit, 0.0), 1.0), size=n) * extra, 0)
        cold_part = (1.0 - hit) * (extra_ms or 0.0)
    if k == 1 and bs == traced_bs:
        collate = m.collate_ns[idx[:, 0]] * (bs / m.n[idx[:, 0]])
    else:
        collate = np.full(n, (model.collate_ms_per_batch + model.collate_ms_per_sample * bs) * 1e6)
    write = model.worker_path_ns(nw, bs)[0]  # a worker's collation into shared memory (a num_workers=0 trace)
    prep = items + collate + m.other_ns[idx[:, 0]] + write
    if nw > 0 and m.loop_runq_ns is not None and model.without_workers:
        # the loop thread waited for a CPU (the main process's own threads: intra-op pools, the step's); a
        # worker's thread, alone in its process (torch sets it one intra-op thread), does not meet them
        prep = prep - m.loop_runq_ns[idx].sum(axis=1) * scale
    if m.io_ns is not None and model.io_scale:  # each batch's storage time at this many readers (model.storage)
        ws = sorted(model.io_scale)
        at = np.interp(m.io_workers, ws, [model.io_scale[w] for w in ws])  # its run's readers
        ratio = model.io_factor(max(nw, 1)) / at
        prep = prep + ((ratio[idx] - 1.0) * m.io_ns[idx]).sum(axis=1) * scale
    parts = {name: d.mean_ms for name, d in model.op_ms.items() if name != "collate" and d.mean_ms}
    if "load" in parts and hit is not None and model.warm_load_ms is not None and model.base_state == "warm":
        parts["load"] = model.warm_load_ms
    parts["collate"] = model.collate_ms_per_sample + (model.collate_ms_per_batch + write / 1e6) / bs
    return np.maximum(prep, 0), parts, cold_part


def predict(model, num_workers: int, cpus: float | None, *, batch_size: int | None = None,
            cache_hit_rate: float | None = None, prefetch_factor: int | None = None, n_batches: int = 400,
            seed: int = 0) -> Prediction:
    """Samples/s, the loop's wait share and the bottleneck of one configuration (see the module doc)."""
    t = model.traced
    bs = int(batch_size or t.batch_size)
    nw = int(num_workers)
    pf = int(prefetch_factor or t.prefetch_factor or 2) if nw > 0 else 0
    out = Prediction(num_workers=nw, cpus=cpus, batch_size=bs, prefetch_factor=pf, cache_hit_rate=cache_hit_rate,
                     samples_per_s=None, wait_share=None, bottleneck=None)
    if cpus is None:
        out.notes.append("CPUs not given: assumed enough for every worker")
    elif cpus <= 0:
        out.reason = "cpus must be > 0"
        return out
    if model.measured is None or len(model.measured.n) == 0:
        out.reason = "the model holds no measured batches"
        return out
    if cache_hit_rate is not None and cache_hit_rate < 1.0 and model.base_state == "warm" \
            and model.cold_extra_ms is None:
        out.reason = ("the cold (disk) read cost is unknown: run a cold-cache probe, or give io_bytes_per_s and "
                      "bytes_per_sample")
        return out
    if cache_hit_rate is not None and cache_hit_rate > 0 and model.base_state == "cold" \
            and model.cold_extra_ms is None:
        out.reason = "the warm (page cache) read cost is unknown: only cold-cache runs were traced"
        return out
    rng = np.random.default_rng(seed)
    prep, parts, cold_part = _prep_ns(model, bs, cache_hit_rate, rng, n_batches, nw)
    m = model.measured
    handoff = rng.choice(m.handoff_ns, n_batches) if m.handoff_ns.size else np.zeros(n_batches)
    dispatch = rng.choice(m.dispatch_ns, n_batches) if m.dispatch_ns.size else np.zeros(n_batches)
    pin = rng.choice(m.pin_ns, n_batches) if m.pin_ns is not None and nw > 0 else None
    touch = model.worker_path_ns(nw, bs)[1]  # the main process's first touch of a batch a worker made
    if touch and pin is not None:
        pin = pin + touch
    elif touch:
        handoff = handoff + touch
    prep_mean = float(prep.mean())
    full = model.cpu.stretch(nw, cpus) if nw > 0 else 1.0
    gap = model.free_gap_ms * 1e6
    out.input_samples_per_s = (nw * bs / (prep_mean * full + gap) if nw > 0 else bs / prep_mean) * 1e9
    steps, why = _step_at(model, bs)
    if steps is None:
        out.reason = why
        return out
    step = steps[(rng.integers(0, len(steps)) + np.arange(n_batches)) % len(steps)]
    consumer_ns = float(step.mean() + handoff.mean())
    out.step_samples_per_s = bs / consumer_ns * 1e9
    warm = min(2 * pf * max(nw, 1), n_batches // 4)

    def simulate(arrive_ns: float):
        lat = Latencies(start_ns=int(model.start_latency_ms * 1e6), free_gap_ns=int(gap), arrive_ns=int(arrive_ns),
                        first_dispatch_gap_ns=0, first_request_gap_ns=0, dispatch_in_wait_ns=0,
                        next_dispatch_gap_ns=0, busy_share=model.handoff_busy_share)
        times, s = run_with_cpus(prep, step, n_workers=nw, cpus=cpus, cpu=model.cpu, first=warm, prefetch_factor=pf,
                                 dispatch_dur_ns=dispatch, ready_wait_ns=handoff, late_wait_ns=handoff, lat=lat,
                                 pin_ns=pin)
        cons = times.consumed_ns
        span = float(cons[-1] - cons[warm])
        rate = bs * (len(cons) - 1 - warm) / span * 1e9
        wait_share = float(times.wait_dur_ns[warm + 1:].sum()) / span
        epoch = _epoch_cycle(model, bs, nw, cpus, pf, rate, wait_share, handoff, dispatch, pin, lat, seed,
                             cache_hit_rate)
        return s, span, rate, wait_share, epoch

    arrive = model.arrive_latency_ms * 1e6
    s, span, rate, wait_share, epoch = simulate(arrive)
    service, per_busy = (model.handoff_service_ms or 0.0) * 1e6, model.handoff_busy_ms * 1e6 * _busy_scale(model, s)
    # the hand-off's latency at this rate (lotus.model.handoff), to the fixed point; not where the traced latency
    # is under 2% of a batch's preparation (it moves nothing there: each iteration is a whole simulation)
    if nw > 0 and service + per_busy > 0 and (arrive >= 0.02 * prep_mean or model.handoff_busy_share > 0):
        from lotus.model.handoff import busy_share, wait_ns

        per_epoch = model.epoch_batches * model.traced.batch_size / bs if model.epoch_batches else None
        share = busy_share(nw, per_epoch)
        here = service + per_busy * share
        # the latency a rate gives falls as the latency rises (a slower pipeline, fewer batches a second): one
        # fixed point, bracketed between none and the queue's cap and bisected from the traced latency
        lo, hi = 0.0, max(wait_ns(here, 1e12), arrive)
        for _ in range(HANDOFF_ITERATIONS):
            whole = epoch[0] if epoch is not None else rate
            target = wait_ns(here, whole / bs)
            if abs(target - arrive) <= 0.05 * max(arrive, 1e6):
                break
            lo, hi = (arrive, hi) if target > arrive else (lo, arrive)
            arrive = 0.5 * (lo + hi)
            s, span, rate, wait_share, epoch = simulate(arrive)
        busy_part = (f": {_ms(per_busy / 1e6)} ms a hand-off from a worker busy with its next batch, "
                     f"{share:.0%} of them") if per_busy >= 1e6 else ""
        out.notes.append(f"worker -> main hand-off {_ms(arrive / 1e6)} ms at this rate (traced "
                         f"{_ms(model.arrive_latency_ms)} ms; the main process a queue of {_ms(here / 1e6)} ms a "
                         f"batch{busy_part})")
    if nw > 0 and model.handoff_busy_share > 0:
        out.notes.append(f"a hand-off from a worker going on to its next batch takes {model.handoff_busy_share:.0%} "
                         f"of the batches it goes straight on to prepare (its resource-sharer thread waits for the "
                         f"worker's interpreter lock), others {_ms(model.arrive_latency_ms)} ms: simulated per batch")
    out.cpu_stretch = s
    out.bound = slicing_bound(model, s)
    out.busy_workers = float(prep[warm:].sum() * s / span) if nw > 0 else None
    if epoch is not None:
        out.within_epoch_samples_per_s = rate
        rate, wait_share, note = epoch
        out.notes.append(note)
    io_cap = None
    if model.io_bytes_per_s and model.bytes_per_sample and cache_hit_rate is not None and cache_hit_rate < 1:
        io_cap = model.io_bytes_per_s / ((1.0 - cache_hit_rate) * model.bytes_per_sample)
        if io_cap < rate:
            rate = io_cap
            wait_share = max(0.0, 1.0 - rate * consumer_ns / bs / 1e9)
    out.samples_per_s, out.wait_share = rate, min(max(wait_share, 0.0), 1.0)
    out.bottleneck = _bottleneck(model, out, parts, cold_part, io_cap, float(step.mean()), float(handoff.mean()),
                                 prep_mean, pin)
    if cache_hit_rate is None and model.traced.cache_state == "warm":
        out.notes.append("page cache as in the traced run")
    return out


SLICING_BOUND = 0.5  # runnable a CPU: a prediction this far from the runs' time-slicing is a bound


def _busy_scale(model, stretch: float) -> float:
    """The part per busy hand-off at a setting whose workers stretch ``stretch``, against the traced run's:
    scaled down where fewer are runnable a CPU (the thread that serves a hand-off waited for a CPU with the
    workers; 16-batch epochs on the 2-CPU VM, 4 workers' trace (stretch 1.94) -> 2 workers: 24.9 ms a busy
    hand-off where a run at 2 workers (1.09) fitted 14.2, 12.8 / 13.0 ms at stretch 1; whatif 4 -> 2 -19.6% ->
    +3.5% against the job alone), never up: where more are runnable than traced the main process's queue did not
    grow with them (persistent workers on the VM, 2 -> 4 and 8 workers: scaling it up read 474 samples/s as 296)."""
    t = model.traced
    ref = t.cpu_stretch if t.num_workers > 0 and t.cpu_stretch else 1.0
    return min(1.0, stretch / ref) if ref > 0 else 1.0


def slicing_bound(model, stretch: float) -> str | None:
    """"upper" where a configuration time-slices its CPUs more than every run did (at least
    :data:`SLICING_BOUND` runnable a CPU more, and above 1), "lower" where less than every run that sliced;
    None where what slicing costs was fitted, or the configuration is within the runs' levels. Slicing only
    adds CPU work (``slicing >= 0``), so an unfitted cost of 0 makes the rate at most / at least the one given."""
    if model.slicing_identified:
        return None
    levels = [r.cpu_stretch for r in model.runs if r.num_workers > 0 and r.cpu_stretch] or [1.0]
    if stretch > 1.0 and stretch >= max(levels) + SLICING_BOUND:
        return "upper"
    if min(levels) > 1.0 and stretch <= min(levels) - SLICING_BOUND:
        return "lower"
    return None


def _ms(v: float) -> str:
    """Milliseconds for a note: whole ones from 10 on, two significant digits below."""
    return f"{v:,.0f}" if v >= 10 else f"{v:.2g}"


HANDOFF_ITERATIONS = 8  # simulations to find the hand-off's fixed point (bisection: 1/256 of the bracket)
EPOCH_SIM_CAP = 2000  # batches of an epoch simulated from its start; the rest at the steady rate


def _epoch_cycle(model, bs, nw, cpus, pf, rate, wait_share, handoff, dispatch, pin, lat, seed, hit):
    """(samples/s, wait share, note) over whole epochs: each epoch restarts the pipeline (the restart gap,
    fresh workers' boot, the prefetch ramp refilled from empty) as the one measure of a long run sees it;
    None when the traces showed no epoch restart."""
    gap_ms = model.epoch_gap_ms(nw)
    if model.epoch_batches is None or gap_ms is None or not rate:
        return None
    e = max(1, round(model.epoch_batches * model.traced.batch_size / bs))
    n = min(e, EPOCH_SIM_CAP)
    rng = np.random.default_rng(seed + 1)
    prep, _, _ = _prep_ns(model, bs, hit, rng, n, nw)
    steps, _ = _step_at(model, bs)
    step = steps[(rng.integers(0, len(steps)) + np.arange(n)) % len(steps)]
    h = np.resize(handoff, n)
    boot = int(model.epoch_boot_ms * 1e6)
    times, _ = run_with_cpus(prep, step, n_workers=nw, cpus=cpus, cpu=model.cpu, first=0, prefetch_factor=pf,
                             dispatch_dur_ns=np.resize(dispatch, n), ready_wait_ns=h, late_wait_ns=h, lat=lat,
                             pin_ns=None if pin is None else np.resize(pin, n),
                             **({"worker_start_ns": [boot] * nw} if nw > 0 else {}))
    gap = gap_ms * 1e6
    rest = (e - n) * bs / rate * 1e9
    cycle = gap + float(times.consumed_ns[-1]) + rest
    waits = float(times.wait_dur_ns.sum()) + rest * wait_share
    restart = cycle - e * bs / rate * 1e9
    note = (f"epochs of {e} batches: each restarts the pipeline (gap {gap_ms:,.0f} ms"
            + (f", worker start {model.epoch_boot_ms:,.0f} ms" if nw > 0 and model.epoch_boot_ms >= 1 else "")
            + f", prefetch refilled): {max(restart, 0) / cycle:.0%} of an epoch's time; {rate:,.1f} samples/s "
            "inside an epoch")
    return e * bs / cycle * 1e9, min(max(waits / cycle, 0.0), 1.0), note


def _bottleneck(model, p: Prediction, parts: dict, cold_part: float, io_cap, step_ns, handoff_ns, prep_ns,
                pin) -> str:
    if io_cap is not None and p.samples_per_s is not None and p.samples_per_s >= io_cap * 0.999:
        return "I/O (cold reads)"
    if p.num_workers == 0:
        if prep_ns <= step_ns:
            return "step (GPU/model)" if step_ns >= handoff_ns else "main process"
    elif p.wait_share is not None and p.wait_share < FINE_WAIT:
        pin_ns = float(pin.mean()) if pin is not None else 0.0
        return "main process" if max(handoff_ns, pin_ns) > step_ns else "step (GPU/model)"
    io = (model.traced.io_wait_share or 0.0) * model.io_factor(p.num_workers) \
        / model.io_factor(max(model.traced.num_workers, 1))
    if p.num_workers > 0 and io > 0.5 * (1.0 - (model.traced.io_wait_share or 0.0) + io):
        return "I/O (cold reads)"  # most of a fetch's time waits for storage at this many workers
    if p.num_workers > 0 and p.cpus is not None and model.cpu_fraction * (p.num_workers + 1) \
            + model.main_cpu_cores + model.other_cpus > p.cpus * model.cpu_capacity:
        return "CPUs"
    name, worst = max(parts.items(), key=lambda kv: kv[1]) if parts else ("preprocessing", 0.0)
    if cold_part > worst:
        return "I/O (cold reads)"
    return f"preprocessing: {name}"


__all__ = ["FINE_WAIT", "predict"]
