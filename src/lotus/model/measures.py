"""Per-run measurements for :mod:`lotus.model.observation`: step, hand-off, latencies, busy workers, waits,
re-reads and the measured throughput (pure functions of the batches/events DataFrames)."""

from __future__ import annotations

import numpy as np


def _f64(s) -> np.ndarray:
    return s.astype("Float64").to_numpy(np.float64, na_value=np.nan)


WARMUP_FACTOR = 3.0  # leading steps slower than this x the median are start-up (cuDNN autotuning, lazy init)


def warmup_steps(b, step: np.ndarray) -> np.ndarray:
    """Mask of the start-up steps: in each (rank, epoch), the leading run of steps above WARMUP_FACTOR x the
    median step (the first CUDA step can take 40x a steady one; kept, it dominates the mean of a probe)."""
    finite = np.isfinite(step)
    if finite.sum() < 4:
        return np.zeros(len(step), bool)
    slow = np.where(finite, step > WARMUP_FACTOR * np.median(step[finite]), False)
    keys = b["rank"].to_numpy(np.int64) * (1 << 32) + b["epoch"].to_numpy(np.int64)
    out = np.zeros(len(step), bool)
    for k in np.unique(keys):
        idx = np.flatnonzero(keys == k)
        lead = np.cumprod(slow[idx]).astype(bool)  # True while every step so far in the group was slow
        out[idx] = lead
    return out


def steps(b):
    """The loop's time per batch: max(step, gpu_step); step derived from the next request if not traced.
    Start-up steps (:func:`warmup_steps`) are left out: the model predicts the steady state."""
    step = _f64(b["step_dur_ns"])
    source = "step"
    if not np.isfinite(step).any():
        ws, cons = _f64(b["wait_start_ns"]), _f64(b["consumed_ns"])
        same = (b["rank"].to_numpy()[1:] == b["rank"].to_numpy()[:-1]) & \
               (b["epoch"].to_numpy()[1:] == b["epoch"].to_numpy()[:-1])
        step = np.full(len(b), np.nan)
        step[:-1] = np.where(same, ws[1:] - cons[:-1], np.nan)
        source = "next request"
    gpu = _f64(b["gpu_step_ns"])
    if np.isfinite(gpu).any():
        step = np.fmax(step, gpu)
        source = "gpu_step"
    step = step[np.isfinite(step) & (step >= 0) & ~warmup_steps(b, step)]
    return (step, source) if step.size else (None, None)


def handoff(b, nw, prep):
    """Main-process time from 'batch there' to 'handed to the loop' (ns per batch)."""
    wait, ws = _f64(b["wait_dur_ns"]), _f64(b["wait_start_ns"])
    if not np.isfinite(wait).any():
        return None
    if nw == 0:
        h = wait - np.nan_to_num(prep)
    else:
        arrive, cons = _f64(b["arrive_ns"]), _f64(b["consumed_ns"])
        h = cons - np.fmax(ws, arrive)
        if not np.isfinite(h).any():  # no arrive events (original logs): waits of buffered batches
            buf = b["buffered"].to_numpy(dtype=bool, na_value=False)
            h = wait[buf] if buf.any() else np.array([np.nanpercentile(wait, 10)])
    h = h[np.isfinite(h)]
    return np.maximum(h, 0) if h.size else None


def arrive_latency(b) -> float | None:
    """Worker's end of preparation -> the main process has the batch, less pinning (ns, median).

    Taken from the batches the loop was already waiting for when they arrived: it asked more than twice
    the least receive time (of batches that were ready before it asked) and at least 1 ms before. A batch
    that arrived while the loop was busy sat in the queue until the loop asked, which is the loop's pace,
    not a latency of the pipeline. Measured on a GPU-bound run (issue 24, ResNet-152, 16 workers): the
    median of all batches read 2.1 s, the batches waited for 0.7 s; as a latency of every batch the former
    halved the what-if at 8 workers (-45% against the job alone). Fewer than max(5, 2% of the batches)
    waited for (a loop that was the limit throughout): the worker's put plus that least receive time (a
    step-bound CPU job: 144 ms of queueing, 1.2 ms of put and receive; its what-if at 1 worker read -50%,
    now +4%)."""
    queue = _f64(b["queue_ns"]) - np.nan_to_num(_f64(b["pin_dur_ns"]))
    ok = np.isfinite(queue)
    if not ok.any():
        return None
    ws = _f64(b["wait_start_ns"])
    receive = _f64(b["arrive_ns"]) - ws
    # the least receive time: of batches ready (prepared and pinned) before the loop asked for them
    ready = _f64(b["arrive_ns"]) - _f64(b["queue_ns"]) + np.nan_to_num(_f64(b["pin_dur_ns"]))
    asked_late = np.isfinite(receive) & (receive > 0) & (ws >= ready)
    least = float(np.percentile(receive[asked_late], 10)) if asked_late.any() else 0.0
    waited = ok & (receive > max(1e6, 2.0 * least))
    if waited.sum() >= max(5, 0.02 * ok.sum()):
        return float(np.median(queue[waited]))
    put = _f64(b["put_dur_ns"])
    return (float(np.median(put[np.isfinite(put)])) if np.isfinite(put).any() else 0.0) + least


BUSY_LEAST = 5  # batches of each kind (busy / idle worker, the loop waiting) a run needs to tell the split


BUSY_GAP_NS = 2_000_000  # a worker starting its next batch within this of the last one's end went straight on


def busy_handoff(b) -> tuple[float, float, float] | None:
    """A hand-off from a worker that goes on to its next batch against one from a worker with nothing left
    (its last batch of an epoch): (the busy one's latency as a share of what the worker goes straight on to
    prepare: its next batch, and the ones after it that it starts within :data:`BUSY_GAP_NS`; the
    busy latency (ns), the idle one (ns)), medians; None where fewer than :data:`BUSY_LEAST` of either kind
    were waited for, or the busy ones were not at least twice as slow (then every hand-off is slowed alike:
    a queue, :mod:`lotus.model.handoff`).

    Busy: the loop was already waiting when the batch was prepared (its latency is all hand-off), the
    latency from the end of preparation (less pinning) to the main process having it. Idle: the loop waited
    for it, from the later of ready and asked. Measured on the GPU host (16-batch epochs of 2 ms Python
    samples, docs/results/gpu-h200/issue-24/short-epochs/): busy hand-offs 62-80 ms at 2-14 workers, 0.84-1.16
    of the worker's next batch (the runs' medians), idle ones 1-5 ms: the batch's storage is fetched from the
    worker's resource-sharer thread, which needs the interpreter lock the worker holds while it prepares its next
    batch. With prefetch_factor 3 a worker goes straight through two queued batches and the batch waits for both
    (16-batch epochs at 4 workers: 2.48 of the next batch alone, 1.24 of the two)."""
    rank, epoch = b["rank"].to_numpy(np.int64), b["epoch"].to_numpy(np.int64)
    worker = b["worker_id"].to_numpy(np.float64, na_value=np.nan)
    start, end = _f64(b["prep_start_ns"]), _f64(b["prep_end_ns"])
    ready = end + np.nan_to_num(_f64(b["pin_dur_ns"]))
    arrive, ws = _f64(b["arrive_ns"]), _f64(b["wait_start_ns"])
    ok = np.isfinite(worker) & (worker >= 0) & np.isfinite(start) & np.isfinite(end) & np.isfinite(arrive) \
        & np.isfinite(ws)
    if ok.sum() < 2 * BUSY_LEAST:
        return None
    idx = np.flatnonzero(ok)
    order = idx[np.lexsort((start[idx], worker[idx], epoch[idx], rank[idx]))]
    same = (rank[order][1:] == rank[order][:-1]) & (epoch[order][1:] == epoch[order][:-1]) \
        & (worker[order][1:] == worker[order][:-1])
    # what the worker goes straight on to prepare after each batch (ns): the rest of its run of back-to-back
    # preparations (each next one started within BUSY_GAP_NS: it was queued); not straight on, its next batch
    a, c = order[:-1], order[1:]
    on = same & (start[c] - end[a] <= BUSY_GAP_NS)
    run = np.concatenate(([0], np.cumsum(~on)))  # run number of each position in `order`
    last = np.flatnonzero(np.diff(np.append(run, run[-1] + 1)))  # each run's last position
    run_end = end[order[last]][run]  # per position: the end of its run
    nxt = np.full(len(b), np.nan)
    nxt[a[on]] = run_end[:-1][on] - end[a[on]]
    nxt[a[same & ~on]] = (end - start)[c[same & ~on]]
    busy = ok & np.isfinite(nxt) & (nxt > 0) & (ws <= ready)
    idle = ok & ~np.isfinite(nxt) & (arrive > ws)
    if busy.sum() < BUSY_LEAST or idle.sum() < BUSY_LEAST:
        return None
    busy_ns = float(np.median(arrive[busy] - ready[busy]))
    idle_ns = float(np.median(arrive[idle] - np.fmax(ready[idle], ws[idle])))
    if busy_ns < 2.0 * max(idle_ns, 0.0) or busy_ns - idle_ns < 1e6:
        return None
    share = float(np.median((arrive[busy] - ready[busy]) / nxt[busy]))
    return share, busy_ns, max(idle_ns, 0.0)


def concurrency_levels(b, have, n, bins: int = 3, least: int = 30) -> list[tuple[float, float, int]] | None:
    """The run's own variation in workers busy at once: per tercile of a batch's concurrency (the mean
    number of batches in preparation over its preparation, itself included), that mean, the batches' mean
    preparation per sample (ms) and their count; each worker's first batch of an epoch left out (a fresh
    worker). None without ``least`` batches a level: one run then cannot tell contention (shared caches,
    memory bandwidth, hypervisor threads) from the per-sample cost."""
    s, e = _f64(b["prep_start_ns"]), _f64(b["prep_end_ns"])
    ok = have & np.isfinite(s) & np.isfinite(e) & (e > s)
    if ok.sum() < bins * least:
        return None
    s_ok, e_ok = s[ok], e[ok]
    del s, e
    fresh = b[["rank", "epoch", "worker_id"]][ok].groupby(["rank", "epoch", "worker_id"], sort=False) \
        .cumcount().to_numpy() == 0
    # the temporaries dropped as soon as used (a run of millions of batches): the same values
    t = np.concatenate([s_ok, e_ok])
    order = np.argsort(t, kind="stable")
    t = t[order]
    level = np.cumsum(np.where(order < len(s_ok), 1.0, -1.0))  # +1 at a start, -1 at an end, in time order
    del order
    area = np.empty(len(t))
    area[0] = 0.0
    d = np.diff(t)
    d *= level[:-1]
    del level
    np.cumsum(d, out=area[1:])
    del d
    conc = (np.interp(e_ok, t, area) - np.interp(s_ok, t, area)) / (e_ok - s_ok)
    del t, area
    conc, per = conc[~fresh], ((e_ok - s_ok) / n[ok] / 1e6)[~fresh]
    if len(conc) < bins * least:
        return None
    edges = np.quantile(conc, np.linspace(0, 1, bins + 1))
    which = np.clip(np.searchsorted(edges, conc, side="right") - 1, 0, bins - 1)
    out = [(float(conc[which == k].mean()), float(per[which == k].mean()), int((which == k).sum()))
           for k in range(bins) if (which == k).sum() >= least]
    return out if len(out) >= 2 else None


def wait_shares(b) -> tuple[float | None, float | None]:
    """The loop's wait share, and the same without the first batch of each (rank, epoch) (start-up)."""
    from lotus.analysis.diagnosis import loop_spans

    loops = loop_spans(b)
    if loops.empty:
        return None, None
    span, wait = float(loops["span_ns"].sum()), float(loops["wait_ns"].sum())
    if span <= 0:
        return None, None
    w = b[b["wait_dur_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    first = float(w.groupby(["rank", "epoch"], sort=False)["wait_dur_ns"].first().sum()) if len(w) else 0.0
    return wait / span, ((wait - first) / (span - first) if span > first else None)


def busy_workers(b, have) -> float:
    """Mean number of workers preparing a batch, from the first start to the last end of preparation in
    each (rank, epoch): worker start-up and the end of the epoch are not idle workers."""
    sub = b[have]
    keys = sub["rank"].to_numpy().astype(np.int64) << 32 | sub["epoch"].to_numpy().astype(np.int64)
    order = np.argsort(keys, kind="stable")
    cuts = np.r_[0, np.flatnonzero(np.diff(keys[order])) + 1]
    start, end = _f64(sub["prep_start_ns"])[order], _f64(sub["prep_end_ns"])[order]
    total = float(np.sum(np.maximum.reduceat(end, cuts) - np.minimum.reduceat(start, cuts)))
    return float(np.nansum(_f64(sub["prep_dur_ns"]))) / total if total > 0 else 0.0


def worker_latencies(b, have):
    """Median dispatch -> start latency (worker idle) and gap between batches (index waiting)."""
    if b["dispatch_ns"].isna().all():
        return None, None
    lat, gap = [], []
    # each (rank, epoch, worker)'s rows in their order, taken one group at a time: groupby's groups without
    # its sorted copy of the frame (the medians do not depend on the groups' order)
    keys = ("rank", "epoch", "worker_id")
    keep = have.copy()
    for k in keys:
        keep &= b[k].notna().to_numpy(dtype=bool, na_value=False)
    rows = np.flatnonzero(keep)
    del keep
    code = np.zeros(len(rows), np.int64)
    for k in keys:
        _, inv = np.unique(b[k].to_numpy(np.int64, na_value=0)[rows], return_inverse=True)
        code = code * (int(inv.max()) + 1 if len(inv) else 1) + inv
    del inv
    for c in np.unique(code).tolist():
        g = b.take(rows[code == c]).sort_values("prep_start_ns")
        start, end, disp = _f64(g["prep_start_ns"]), _f64(g["prep_end_ns"]), _f64(g["dispatch_ns"])
        prev_end = np.r_[np.nan, end[:-1]]  # a worker's first batch waits for its start-up: left out
        idle = disp > prev_end
        lat.append((start - disp)[idle])
        gap.append((start - prev_end)[~idle])
    lat = np.concatenate(lat) if lat else np.zeros(0)
    gap = np.concatenate(gap) if gap else np.zeros(0)
    # a start before its dispatch: the main and worker processes' clocks disagree (as epoch_restarts)
    lat, gap = lat[np.isfinite(lat) & (lat >= 0)], gap[np.isfinite(gap) & (gap >= 0)]
    return (float(np.median(lat)) if lat.size else None), (float(np.median(gap)) if gap.size else None)


def rereads(ev, rows, dur, nb):
    """Per batch the number of first reads; mean load of first reads and of re-reads (ns), if any."""
    first = np.zeros(nb)
    m, row = rows("load")
    if m is None:
        return first, None
    sample = ev["sample"].to_numpy()[m]
    known = sample >= 0
    if not known.any():
        return first, None
    m, row, sample = m[known], row[known], sample[known]
    t = ev["start_ns"].to_numpy()[m]
    o = np.argsort(t, kind="stable")
    _, idx = np.unique(sample[o], return_index=True)
    is_first = np.zeros(len(m), bool)
    is_first[o[idx]] = True
    first = np.bincount(row[is_first], minlength=nb).astype(np.float64)
    d = dur[m]
    n_first, n_re = int(is_first.sum()), int((~is_first).sum())
    if n_re == 0:
        return first, None
    return first, (float(d[is_first].mean()), float(d[~is_first].mean()), n_first, n_re)


def epoch_restarts(b) -> tuple[int | None, np.ndarray, np.ndarray]:
    """What an epoch costs beyond its batches, from the first rank's batches ``b`` (one loader, sorted):
    ``(batches per epoch, restart gaps ns, worker boots ns)``.

    * batches per epoch: the median count of the epochs before the last (the last may be cut short);
      None with one epoch only.
    * restart gap, per epoch after the first: its first dispatch minus the previous epoch's last hand-off
      (the last step, the loop's end-of-epoch work, the new iterator, its worker processes' start);
    * worker boot, per epoch: its first fetch's start minus its first dispatch (a fresh worker process
      starts before it can fetch; a persistent one does not)."""
    if b.empty:
        return None, np.zeros(0), np.zeros(0)
    r0 = b[b["rank"].to_numpy() == int(b["rank"].min())]
    ep = r0["epoch"].to_numpy(np.int64)
    epochs = np.unique(ep)
    disp, cons, start = _f64(r0["dispatch_ns"]), _f64(r0["consumed_ns"]), _f64(r0["prep_start_ns"])

    def agg(f, v, e):
        x = v[ep == e]
        x = x[np.isfinite(x)]
        return f(x) if x.size else np.nan

    counts = np.array([(ep == e).sum() for e in epochs])
    per_epoch = int(np.median(counts[:-1])) if len(epochs) >= 2 else None
    first_disp = np.array([agg(np.min, disp, e) for e in epochs])
    last_cons = np.array([agg(np.max, cons, e) for e in epochs])
    first_start = np.array([agg(np.min, start, e) for e in epochs])
    consecutive = np.diff(epochs) == 1
    gaps = (first_disp[1:] - last_cons[:-1])[consecutive]
    boots = first_start - first_disp
    return per_epoch, gaps[np.isfinite(gaps) & (gaps >= 0)], boots[np.isfinite(boots) & (boots >= 0)]


def int_or_none(v) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def measured_rate(batches, loaders: dict, loader: int, ranks: int
                  ) -> tuple[float | None, tuple[float, float] | None, str | None]:
    """The one measure (:mod:`lotus.analysis.throughput`) of ``loader`` per rank, its 95% interval and its
    note (a wide interval, a short window), as ``lotus analyze throughput`` reports them, from ``batches``
    (the run's, or any rows that hold every consumed ok batch of ``loader``)."""
    from lotus.analysis.runspread import combine
    from lotus.analysis.throughput import loader_rates

    rates = [r for (_rank, lid), (r, _nb, _ns) in loader_rates(batches, loaders).items() if lid == loader]
    total, ci = combine(rates)
    note = "; ".join(sorted({r.note for r in rates if r.note})) or None
    if total is None:
        return None, None, note
    return total / ranks, ((ci[0] / ranks, ci[1] / ranks) if ci else None), note


__all__ = ["arrive_latency", "batch_bytes", "busy_workers", "concurrency_levels", "epoch_restarts", "handoff",
           "int_or_none", "measured_rate", "rereads", "steps", "wait_shares", "worker_latencies"]


def sched_sums(b, have) -> tuple[float, float, float] | None:
    """(fetch ns, run-queue ns, on-CPU ns) summed over the batches whose fetch carries the scheduler's view
    (``runq_ns``/``prep_cpu_ns``, format >= 4 on Linux); None when none does."""
    prep, runq, cpu = _f64(b["prep_dur_ns"]), _f64(b["runq_ns"]), _f64(b["prep_cpu_ns"])
    ok = have & np.isfinite(prep) & np.isfinite(runq) & np.isfinite(cpu) & (prep > 0)
    if ok.sum() < 10:
        return None
    return float(prep[ok].sum()), float(runq[ok].sum()), float(cpu[ok].sum())


def storage_waits(b, have) -> tuple[np.ndarray, float, float] | None:
    """Per batch, the time its fetch spent off a CPU while reading from storage (ns: fetch - on-CPU -
    run-queue, for the batches whose thread read bytes from a block device, ``disk_read_bytes`` > 0, format
    >= 5 on Linux; 0 for the others), with the bytes read and the samples of the batches that say; None when
    no batch read from storage."""
    disk = _f64(b["disk_read_bytes"])
    if not (np.isfinite(disk) & (disk > 0) & have).any():
        return None
    prep, runq, cpu, n = (_f64(b[c]) for c in ("prep_dur_ns", "runq_ns", "prep_cpu_ns", "n_samples"))
    ok = have & np.isfinite(disk) & np.isfinite(prep) & np.isfinite(runq) & np.isfinite(cpu)
    io = np.where(ok & (disk > 0), np.maximum(prep - cpu - runq, 0.0), 0.0)
    return io, float(disk[ok].sum()), float(np.nansum(n[ok]))


def main_cpu_cores(ev, loader: int) -> float | None:
    """The main process's CPU use in cores (all its threads) from its ``main_cpu`` records of ``loader``: the
    CPU between the second and the last record of each rank over the time between them (the first is taken
    at the loader's first hand-off, with the start-up's CPU before it), averaged over ranks; None with
    fewer than three records in every rank."""
    if "name" not in ev or not (ev["name"] == "main_cpu").any():
        return None
    rows = ev[(ev["name"] == "main_cpu").to_numpy() & (ev["loader"].to_numpy() == loader)]
    cores = []
    for _, g in rows.groupby("rank"):
        t = g["start_ns"].to_numpy(np.int64)
        order = np.argsort(t, kind="stable")
        t, cpu = t[order], g["arg"].to_numpy(np.int64)[order]
        if len(t) >= 3 and t[-1] > t[1] and cpu[-1] >= cpu[1]:
            cores.append((cpu[-1] - cpu[1]) / (t[-1] - t[1]))
    return float(np.mean(cores)) if cores else None


def batch_bytes(ev, loader: int) -> float | None:
    """The median bytes of a collated batch of ``loader`` from its ``batch_bytes`` records (trace format >= 6:
    one batch in :data:`lotus.trace.schema.BATCH_BYTES_EVERY`); None without any."""
    if "name" not in ev or not (ev["name"] == "batch_bytes").any():
        return None
    rows = ev[(ev["name"] == "batch_bytes").to_numpy() & (ev["loader"].to_numpy() == loader)]
    b = rows["arg"].to_numpy(np.int64)
    b = b[b >= 0]
    return float(np.median(b)) if b.size else None
