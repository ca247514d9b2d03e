"""The one discrete-event simulator of torch's DataLoader in lotus (map-style dataset, in-order delivery).

Used by :mod:`lotus.model` to predict throughput and by :mod:`lotus.trace.synthetic` to make test traces.
Pure numpy and Python; no lotus imports (the trace package depends on this module, not the reverse).

What it models, per epoch (all times integer ns)::

    worker of batch i      i mod W (round robin), W = num_workers
    in flight              prefetch_factor * W indices dispatched ahead; the index of batch i + inflight is
                           dispatched while the loop receives batch i (inside its wait, as torch does)
    worker                 prep_start_i = max(dispatch_i + start_latency, worker free)
                           prep_end_i   = prep_start_i + prep_i ; worker free again after free_gap
    main, per batch        arrive_i = prep_end_i + arrive_latency  (then the pin thread, serial, if any),
                           + busy_share * (the worker's run of batches i + W, i + 2W, ... each dispatched
                           by the end of the one before: what it goes straight on to prepare)
                           the loop asks at t; batch ready (arrive_i <= t): wait = ready_wait_i,
                           otherwise wait = arrive_i - t + late_wait_i ; consumed_i = t + wait
                           next request at consumed_i + step_i
    num_workers = 0        the loop prepares each batch itself: wait = dispatch + prep + hand-off

CPU contention is a mean-field processor-sharing model (:func:`cpu_stretch`): worker CPU work takes
``stretch`` times its uncontended time, where the stretch depends on how many workers are busy on
average (and how much of the time the main process is not blocked waiting), which in turn depends on
the stretch; :func:`run_with_cpus` iterates to the fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LoaderTimes:
    """Per-batch times of one simulated epoch (int64 ns arrays; ``worker_of`` -1 for num_workers=0)."""

    worker_of: np.ndarray
    dispatch_ns: np.ndarray
    prep_start_ns: np.ndarray
    prep_end_ns: np.ndarray
    arrive_ns: np.ndarray
    wait_start_ns: np.ndarray
    wait_dur_ns: np.ndarray
    buffered: np.ndarray
    consumed_ns: np.ndarray
    loop_end_ns: int  # the loop's request after the last batch
    worker_free_ns: np.ndarray  # (W,) when each worker finished its last batch


@dataclass(frozen=True)
class Latencies:
    """Fixed latencies of the loader's plumbing (ns). Defaults are those of the synthetic traces."""

    start_ns: int = 40_000  # index dispatched -> worker starts preparing
    free_gap_ns: int = 5_000  # worker between two batches
    arrive_ns: int = 60_000  # batch put by the worker -> received by the main process
    first_dispatch_gap_ns: int = 1_000  # between the initial dispatches
    first_request_gap_ns: int = 10_000  # last initial dispatch -> the loop's first request
    dispatch_in_wait_ns: int = 5_000  # the wait lasts at least dispatch + this
    next_dispatch_gap_ns: int = 2_000  # next index dispatched this long before consumption
    # a batch whose worker goes on to its next one (dispatched by the end of this one) arrives later by this share
    # of that next batch's preparation (the worker holds the lock its hand-off needs); 0: every batch alike
    busy_share: float = 0.0


def run_loader(prep_ns, step_ns, *, n_workers: int, prefetch_factor: int, dispatch_dur_ns, ready_wait_ns,
               late_wait_ns, t0_ns: int = 0, worker_start_ns=None, lat: Latencies = Latencies(),
               pin_ns=None) -> LoaderTimes:
    """Simulate one epoch of ``len(prep_ns)`` batches (see the module doc). Arrays are per batch, ns."""
    step = [int(v) for v in step_ns]
    loop = loader_loop(prep_ns, n_workers=n_workers, prefetch_factor=prefetch_factor, dispatch_dur_ns=dispatch_dur_ns,
                       ready_wait_ns=ready_wait_ns, late_wait_ns=late_wait_ns, t0_ns=t0_ns,
                       worker_start_ns=worker_start_ns, lat=lat, pin_ns=pin_ns)
    try:
        loop.send(None)
        for i in range(len(step)):
            loop.send(step[i])
    except StopIteration as done:
        return done.value
    raise RuntimeError("the loader loop did not end")  # pragma: no cover - one step per batch ends it


def loader_loop(prep_ns, *, n_workers: int, prefetch_factor: int, dispatch_dur_ns, ready_wait_ns, late_wait_ns,
                t0_ns: int = 0, worker_start_ns=None, lat: Latencies = Latencies(), pin_ns=None):
    """:func:`run_loader` as a generator, for loops whose steps depend on other loops (ranks in lockstep):
    it yields each batch's hand-off (consumed ns) and is sent that batch's step (ns); it returns the
    :class:`LoaderTimes` (``StopIteration.value``) after the last batch's step."""
    nb = len(prep_ns)
    prep = [int(v) for v in prep_ns]
    disp = [int(v) for v in dispatch_dur_ns]
    ready = [int(v) for v in ready_wait_ns]
    late = [int(v) for v in late_wait_ns]
    if n_workers <= 0:
        return (yield from _in_process(prep, disp, late, t0_ns))
    nw = n_workers
    pin = None if pin_ns is None else [int(v) for v in pin_ns]
    free = [int(t0_ns)] * nw if worker_start_ns is None else [int(v) for v in worker_start_ns]
    inflight = prefetch_factor * nw
    dispatch = [0] * nb
    cursor = int(t0_ns)
    for i in range(min(nb, inflight)):
        dispatch[i] = cursor
        cursor += disp[i] + lat.first_dispatch_gap_ns
    p_start, p_end, arrive = [0] * nb, [0] * nb, [0] * nb
    w_start, w_dur, buffered, consumed = [0] * nb, [0] * nb, [False] * nb, [0] * nb
    t_main = cursor + lat.first_request_gap_ns
    pin_free = 0
    for i in range(nb):
        w = i % nw
        s = max(dispatch[i] + lat.start_ns, free[w])
        end = s + prep[i]
        p_start[i], p_end[i] = s, end
        free[w] = end + lat.free_gap_ns
        a = end + lat.arrive_ns
        if lat.busy_share > 0:  # the worker's next batches queued by the end of each one: the batch waits for them
            k, run_end = i + nw, end
            while k < nb and (k < inflight or k - inflight < i) and dispatch[k] <= run_end:
                run_end = max(dispatch[k] + lat.start_ns, run_end + lat.free_gap_ns) + prep[k]
                k += nw
            a += int(lat.busy_share * (run_end - end))
        if pin is not None:
            a = max(a, pin_free) + pin[i]
            pin_free = a
        arrive[i] = a
        w_start[i] = t_main
        if a <= t_main:
            buffered[i] = i > 0 and a <= consumed[i - 1]
            wait = ready[i]
        else:
            wait = a - t_main + late[i]
        nxt = i + inflight
        if nxt < nb:  # the next index is dispatched inside this wait, as torch does
            wait = max(wait, disp[nxt] + lat.dispatch_in_wait_ns)
        w_dur[i] = wait
        consumed[i] = t_main + wait
        if nxt < nb:
            dispatch[nxt] = consumed[i] - disp[nxt] - lat.next_dispatch_gap_ns
        t_main = consumed[i] + (yield consumed[i])
    a64 = np.asarray
    return LoaderTimes(
        worker_of=np.arange(nb) % nw, dispatch_ns=a64(dispatch, np.int64), prep_start_ns=a64(p_start, np.int64),
        prep_end_ns=a64(p_end, np.int64), arrive_ns=a64(arrive, np.int64), wait_start_ns=a64(w_start, np.int64),
        wait_dur_ns=a64(w_dur, np.int64), buffered=a64(buffered, bool), consumed_ns=a64(consumed, np.int64),
        loop_end_ns=int(t_main), worker_free_ns=a64(free, np.int64))


def _in_process(prep, disp, late, t0_ns):
    nb = len(prep)
    t = int(t0_ns)
    dispatch, p_start, p_end, w_start, w_dur, consumed = ([0] * nb for _ in range(6))
    for i in range(nb):
        w_start[i] = dispatch[i] = t
        p_start[i] = t + disp[i]
        p_end[i] = p_start[i] + prep[i]
        consumed[i] = p_end[i] + late[i]
        w_dur[i] = consumed[i] - t
        t = consumed[i] + (yield consumed[i])
    a64 = np.asarray
    return LoaderTimes(
        worker_of=np.full(nb, -1), dispatch_ns=a64(dispatch, np.int64), prep_start_ns=a64(p_start, np.int64),
        prep_end_ns=a64(p_end, np.int64), arrive_ns=a64(p_end, np.int64), wait_start_ns=a64(w_start, np.int64),
        wait_dur_ns=a64(w_dur, np.int64), buffered=np.zeros(nb, bool), consumed_ns=a64(consumed, np.int64),
        loop_end_ns=int(t), worker_free_ns=np.zeros(0, np.int64))


# -- CPU contention ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuModel:
    """How worker time stretches with the number of busy workers and the CPUs (see :func:`cpu_stretch`)."""

    main_cpu_cores: float = 1.0  # CPU the main process uses
    contention: float = 0.0  # slowdown per extra worker running at once
    cpu_fraction: float = 1.0  # share of worker time that needs a CPU (the rest waits: I/O, sleep)
    capacity: float = 1.0  # CPUs' worth of work one CPU does here (> 1: fewer runnable than the load says)
    main_measured: bool = False  # main_cpu_cores is the main process's measured use (all its threads)
    other_cpus: float = 0.0  # other work runnable on the same CPUs (other tenants), in CPUs: shares them too
    slicing: float = 0.0  # extra CPU work per unit of time-slicing beyond one runnable a CPU (cache refills)

    def stretch(self, busy: float, cpus: float | None, main_busy: float = 1.0) -> float:
        """``main_busy``: share of the time the main process is not blocked waiting for a batch (ignored
        where the main process's CPU use was measured: that use is the whole of it)."""
        main = self.main_cpu_cores if self.main_measured else self.main_cpu_cores * min(max(main_busy, 0.0), 1.0)
        return cpu_stretch(busy, None if cpus is None else cpus * self.capacity, main + self.other_cpus,
                           self.contention, self.cpu_fraction, self.slicing)


def cpu_stretch(busy_workers: float, cpus: float | None, main_cpu_cores: float = 1.0, contention: float = 0.0,
                cpu_fraction: float = 1.0, slicing: float = 0.0) -> float:
    """Wall time of worker work relative to one worker alone on an idle machine.

    Processor sharing: ``busy_workers`` workers, each needing a CPU for ``cpu_fraction`` of its time, plus
    the main process (``main_cpu_cores``) share ``cpus`` CPUs; CPU work stretches by
    ``ps = max(1, (cpu_fraction * busy + main) / cpus)`` and the rest not: ``cpu_fraction * ps + (1 -
    cpu_fraction)``. On top, ``contention`` (per extra worker running at once) models shared caches and
    memory bandwidth: ``* (1 + contention * (running - 1))`` with ``running = busy / ps`` workers on a
    CPU at once. ``slicing`` prices time-slicing: where more is runnable than the CPUs (``ps > 1``) each
    process resumes on caches the others filled, so its CPU work itself grows, by ``1 + slicing * (ps - 1)``
    (JPEG decoding workers on the GPU host: +26% CPU a batch from ``ps`` 2 to 4; 0 for work that keeps
    nothing in the caches). ``cpus=None``: no CPU limit.
    """
    busy = max(float(busy_workers), 0.0)
    phi = min(max(float(cpu_fraction), 0.0), 1.0)
    ps = 1.0 if cpus is None else max(1.0, (phi * busy + main_cpu_cores) / max(float(cpus), 1e-9))
    running = busy / ps
    work = 1.0 + max(slicing, 0.0) * (ps - 1.0)
    return (phi * ps * work + 1.0 - phi) * (1.0 + max(contention, 0.0) * max(running - 1.0, 0.0))


def main_busy(t: LoaderTimes, first: int = 0) -> float:
    """Share of the loop's time from batch ``first`` on that it was not waiting for a batch."""
    span = float(t.consumed_ns[-1] - t.consumed_ns[first]) if first < len(t.consumed_ns) else 0.0
    return 1.0 - float(t.wait_dur_ns[first + 1:].sum()) / span if span > 0 else 1.0


def busy_workers(t: LoaderTimes, first: int = 0) -> float:
    """Mean number of busy workers from batch ``first`` on: worker time / elapsed time."""
    if len(t.worker_of) == 0 or t.worker_of[0] < 0 or first >= len(t.consumed_ns):
        return 0.0
    busy = float((t.prep_end_ns[first:] - t.prep_start_ns[first:]).sum())
    span = float(t.prep_end_ns[first:].max() - t.prep_start_ns[first:].min())
    return busy / span if span > 0 else 0.0


def run_with_cpus(prep_ns, step_ns, *, n_workers: int, cpus: float | None, cpu: CpuModel = CpuModel(),
                  first: int = 0, iterations: int = 8, **kwargs) -> tuple[LoaderTimes, float]:
    """:func:`run_loader` with worker work stretched by the CPU model at its fixed point.

    Starts from all workers busy (an upper bound of the stretch) and iterates ``stretch(busy(stretch))``,
    which decreases monotonically to the fixed point. Returns the times and the stretch used.
    """
    prep = np.asarray(prep_ns, dtype=np.float64)
    if n_workers <= 0:
        return run_loader(prep.astype(np.int64), step_ns, n_workers=0, **kwargs), 1.0
    s = cpu.stretch(n_workers, cpus)
    times = run_loader(np.rint(prep * s).astype(np.int64), step_ns, n_workers=n_workers, **kwargs)
    if s == 1.0 and cpu.contention <= 0 and cpu.slicing <= 0:
        return times, s
    for _ in range(iterations):
        nxt = cpu.stretch(min(busy_workers(times, first), n_workers), cpus, main_busy(times, first))
        if abs(nxt - s) <= 1e-3 * s:
            break
        s = nxt
        times = run_loader(np.rint(prep * s).astype(np.int64), step_ns, n_workers=n_workers, **kwargs)
    return times, s


__all__ = ["CpuModel", "Latencies", "LoaderTimes", "busy_workers", "cpu_stretch", "loader_loop", "main_busy",
           "run_loader", "run_with_cpus"]
