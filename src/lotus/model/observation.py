"""What one traced run measured, per batch, for the fit: pure functions of the events/batches DataFrames.

The model describes one DataLoader: the run's main loader (the one that handed out the most batches;
a validation loader is left out). Failed batches and exhausted fetches are not batches
(:func:`lotus.query.batches.ok_batches`); their per-sample events are dropped with them.

The per-sample and op events come from the events DataFrame (:func:`lotus.model.detail.detail_of_events`)
or, for a run read by the out-of-core engine (its events carry an ``op_engine`` and no per-sample
events), from the trace files in chunks (:func:`lotus.model.scandetail.detail_of_scan`): the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lotus.errors import InputError
from lotus.model import measures
from lotus.model.batchsource import RunTrace, main_loader, select
from lotus.model.detail import batch_keys, detail_of_events
from lotus.model.params import RunSummary


@dataclass
class Observation:
    summary: RunSummary
    n: np.ndarray
    prep_ns: np.ndarray
    items_ns: np.ndarray
    load_ns: np.ndarray
    collate_ns: np.ndarray
    other_ns: np.ndarray
    first_reads: np.ndarray  # per batch: loads of samples read for the first time in the run
    op_ns: dict  # op -> durations (ns): an array, or a lotus.analysis.exactstats.Floats stream (scanned run)
    step_ns: np.ndarray | None
    step_source: str | None
    handoff_ns: np.ndarray | None
    dispatch_ns: np.ndarray
    pin_ns: np.ndarray | None
    start_latency_ns: float | None
    arrive_latency_ns: float | None
    free_gap_ns: float | None
    reread: tuple[float, float, int, int] | None  # mean load (ns) of first reads, of re-reads, counts
    description: dict
    epoch_batches: int | None = None  # batches per epoch (None: one epoch seen)
    epoch_gap_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))  # restart gaps between epochs
    epoch_boot_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))  # first dispatch -> first fetch
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    levels: list | None = None  # measures.concurrency_levels: (workers at once, ms a sample, batches)
    io_ns: np.ndarray | None = None  # per batch: off a CPU reading from storage (measures.storage_waits)
    # per batch, num_workers=0 runs (format >= 6): the loop thread's run-queue delay in its fetch (ns; 0: unknown)
    loop_runq_ns: np.ndarray | None = None
    # measures.busy_handoff: (a busy worker's hand-off as a share of its queued run, its latency ns, an idle one's ns)
    busy_handoff: tuple[float, float, float] | None = None


# the batches columns observe() reads (with lotus.model.measures, lotus.analysis.throughput.loader_rates and
# lotus.analysis.diagnosis.loop_spans; put_dur_ns: read by main's measures since): a run loaded only for the fit
# keeps only these (load_run(columns=)); a column read but missing here is a KeyError in observe
MODEL_COLUMNS = ["rank", "loader", "epoch", "batch_id", "worker_id", "dispatch_ns", "prep_start_ns", "prep_dur_ns",
                 "prep_end_ns", "n_samples", "collate_dur_ns", "put_dur_ns", "failed", "arrive_ns", "pin_dur_ns",
                 "wait_start_ns", "wait_dur_ns", "buffered", "consumed_ns", "step_dur_ns", "queue_ns", "gpu_step_ns",
                 "detail", "runq_ns", "prep_cpu_ns", "disk_read_bytes"]


def _i64(s, fill=-1) -> np.ndarray:
    return s.astype("Int64").fillna(fill).to_numpy(np.int64)


def _f64(s) -> np.ndarray:
    return s.astype("Float64").to_numpy(np.float64, na_value=np.nan)


def _take(a: np.ndarray, have: np.ndarray) -> np.ndarray:
    """``a[have]``, or ``a`` itself where every row is kept (no copy)."""
    return a if have.all() else a[have]


def observe(run: RunTrace) -> Observation:
    """Per-batch costs of the run's main loader (raw wall times, ns) and what it measured.

    The batches are read a few columns at a time (:mod:`lotus.model.batchsource`) and each per-batch array
    is dropped once reduced: the peak is the arrays the Observation keeps plus one measure's columns."""
    from lotus.analysis.stats import op_engine

    src = select(run, run.name)
    loader = src.loader
    k = src.cols(["rank", "epoch", "batch_id", "prep_dur_ns", "worker_id", "n_samples"])
    ranks = sorted(int(r) for r in k["rank"].unique())
    desc = dict(run.loaders.get((ranks[0], loader)) or {})
    prep = _f64(k["prep_dur_ns"])
    have = np.isfinite(prep)
    if not have.any():
        raise InputError(f"{run.name}: no batch preprocessing (fetch) events: the model needs the workers' "
                         "trace files")
    notes, missing = [], []
    workers = sorted({int(w) for w in np.unique(_i64(k["worker_id"])[have])})
    nw = desc.get("num_workers")
    if not isinstance(nw, int):
        nw = len([w for w in workers if w >= 0])
        notes.append(f"{run.name}: no loader description: num_workers={nw} from the workers seen")
    bs = desc.get("batch_size")
    n = _f64(k["n_samples"])
    if not isinstance(bs, int) or bs <= 0:
        bs = int(np.nanmax(n)) if np.isfinite(n).any() else 1
    n = np.where(np.isfinite(n) & (n > 0), n, bs)
    pf = desc.get("prefetch_factor") if nw > 0 else 0
    if nw > 0 and not isinstance(pf, int):
        pf = 2
        notes.append(f"{run.name}: prefetch_factor unknown: torch's default 2 assumed")

    keys = batch_keys(k["rank"], k["epoch"], k["batch_id"])
    del k
    # the measures that keep no per-batch array first, while the only ones alive are the keys, prep and n
    from lotus.analysis.throughput import RATE_COLUMNS

    rate, rate_ci, rate_note = measures.measured_rate(src.rate_rows(RATE_COLUMNS), run.loaders, loader, len(ranks))
    start_lat, free_gap = measures.worker_latencies(
        src.cols(["rank", "epoch", "worker_id", "dispatch_ns", "prep_start_ns", "prep_end_ns"]), have)
    arrive_lat = measures.arrive_latency(src.cols(["queue_ns", "pin_dur_ns", "wait_start_ns", "arrive_ns",
                                                   "put_dur_ns"]))
    busy_handoff = measures.busy_handoff(src.cols(["rank", "epoch", "worker_id", "prep_start_ns", "prep_end_ns",
                                                   "pin_dur_ns", "arrive_ns", "wait_start_ns"])) if nw > 0 else None
    epoch_batches, epoch_gaps, epoch_boots = measures.epoch_restarts(
        src.cols(["rank", "epoch", "dispatch_ns", "consumed_ns", "prep_start_ns"]))
    spans = ["rank", "epoch", "worker_id", "prep_start_ns", "prep_end_ns", "prep_dur_ns"]
    busy = measures.busy_workers(src.cols(spans), have) if nw > 0 else 0.0
    levels = measures.concurrency_levels(src.cols(spans), have, n) if nw > 1 else None
    wait_share, steady_wait = measures.wait_shares(src.cols(["rank", "loader", "epoch", "failed", "wait_start_ns",
                                                             "wait_dur_ns", "consumed_ns"]))

    sched = measures.sched_sums(src.cols(["prep_dur_ns", "runq_ns", "prep_cpu_ns"]), have) \
        if nw > 0 and src.has("runq_ns") else None
    main_cores = measures.main_cpu_cores(run.events, loader)
    storage = measures.storage_waits(src.cols(["prep_dur_ns", "runq_ns", "prep_cpu_ns", "disk_read_bytes",
                                               "n_samples"]), have) \
        if nw > 0 and src.has("disk_read_bytes") else None

    # per-batch sums of per-sample events, op durations, dispatches and re-reads, matched on the batch key
    ev = run.events
    if op_engine(ev) is None:
        of_loader = ev["loader"].to_numpy() == loader
        if not of_loader.all():  # a validation loader too: leave its events out (a copy only then)
            ev = ev[of_loader]
        d = detail_of_events(ev, keys)
    else:  # a scanned run (lotus.query.scan): its per-sample events are read from the files in chunks
        from lotus.model.scandetail import detail_of_scan

        d = detail_of_scan(op_engine(ev), keys, loader, dataset_len=measures.int_or_none(desc.get("dataset_len")))
    del keys, ev
    op_ns, dispatch_ns, first_reads, reread = d.op_ns, d.dispatch_ns, d.first_reads, d.reread
    items, load, reduced = _items(d, src, n, prep, have, missing)  # d's sums freed as they are used
    del d
    collate, other = reduced
    sample_ms = float(np.nansum(items[have]) / np.sum(n[have]) / 1e6) if have.any() else None

    step_ns, step_source = measures.steps(src.cols(["rank", "epoch", "step_dur_ns", "wait_start_ns", "consumed_ns",
                                                    "gpu_step_ns"]))
    if step_ns is None:
        missing.append("the loop's step time (no step, wait or gpu_step events)")
    handoff = measures.handoff(src.cols(["wait_dur_ns", "wait_start_ns", "arrive_ns", "consumed_ns", "buffered"]),
                               nw, prep)
    if handoff is None:
        missing.append("the main process's hand-off time (no wait events)")
    pin = _f64(src.cols(["pin_dur_ns"])["pin_dur_ns"])
    pin = pin[np.isfinite(pin)] if np.isfinite(pin).any() else None
    cpus = desc.get("cpus_available")
    cpus = float(cpus) / len(ranks) if isinstance(cpus, int | float) and cpus > 0 else None
    if cpus is not None and len(ranks) > 1:
        notes.append(f"{run.name}: {len(ranks)} ranks: CPUs split evenly among them ({cpus:g} per rank)")
    summary = RunSummary(
        name=run.name, num_workers=int(nw), cpus=cpus, batch_size=int(bs), prefetch_factor=int(pf or 0),
        ranks=len(ranks), batches=int(have.sum()), cache_state=run.cache_state or "warm",
        samples_per_s=rate, samples_per_s_ci95=rate_ci, samples_per_s_note=rate_note, wait_share=wait_share,
        steady_wait_share=steady_wait, busy_workers=busy, sample_ms=sample_ms,
        dataset_len=measures.int_or_none(desc.get("dataset_len")), sampler=desc.get("sampler"),
        sched_prep_ns=sched[0] if sched else None, sched_runq_ns=sched[1] if sched else None,
        sched_cpu_ns=sched[2] if sched else None, main_cpu_cores=main_cores,
        disk_bytes_per_sample=storage[1] / storage[2] if storage and storage[2] > 0 else None,
        io_wait_share=float(storage[0].sum() / np.nansum(prep[have])) if storage else None,
        batch_bytes=measures.batch_bytes(run.events, loader))
    if desc.get("in_order") is False or desc.get("delivery_order") not in (None, "in_order"):
        notes.append(f"{run.name}: the loader does not deliver in order; the model simulates in-order delivery")
    return Observation(
        summary=summary, n=_take(n, have), prep_ns=_take(prep, have), items_ns=_take(items, have),
        load_ns=_take(load, have), collate_ns=_take(collate, have), other_ns=_take(other, have),
        first_reads=_take(first_reads, have), op_ns=op_ns,
        step_ns=step_ns, step_source=step_source, handoff_ns=handoff, dispatch_ns=dispatch_ns, pin_ns=pin,
        start_latency_ns=start_lat, arrive_latency_ns=arrive_lat, free_gap_ns=free_gap, reread=reread,
        description=desc, epoch_batches=epoch_batches, epoch_gap_ns=epoch_gaps, epoch_boot_ns=epoch_boots,
        missing=missing, notes=notes, levels=levels, io_ns=_take(storage[0], have) if storage else None,
        loop_runq_ns=_loop_runq(src, have) if nw == 0 else None, busy_handoff=busy_handoff)


def _loop_runq(src, have) -> np.ndarray | None:
    """Per batch of a num_workers=0 run, the run-queue delay its loop thread met while preparing it (ns: the
    ``runq`` records of format >= 6); a batch without one (the loop measures one fetch in
    lotus.dataloader.schedstat.METER_EVERY) at the measured batches' delay per ns of fetch; None where no batch
    has it."""
    if not src.has("runq_ns"):
        return None
    c = src.cols(["runq_ns", "prep_dur_ns"])
    r, prep = _f64(c["runq_ns"]), _f64(c["prep_dur_ns"])
    measured = np.isfinite(r) & (r >= 0) & np.isfinite(prep)
    if not measured[have].any():
        return None
    share = float(r[measured & have].sum()) / max(float(prep[measured & have].sum()), 1.0)
    return _take(np.where(measured, r, np.where(np.isfinite(prep), share * prep, 0.0)), have)


def _sums_of(d) -> list:
    """``d``'s per-batch sums and counts (sample sum and count, load sum and count, transform sum), taken out of
    it (its fields set to None), so that each is freed once :func:`_items` has used it."""
    out = [d.sample_sum, d.sample_count, d.load_sum, d.load_count, d.transform_sum]
    d.sample_sum = d.sample_count = d.load_sum = d.load_count = d.transform_sum = None
    return out


def _items(d, src, n, prep, have, missing):
    """(items, load, (collate, other)) per batch (ns) from the per-sample sums of ``d`` (taken out of it:
    :func:`_sums_of`) and the batches' detail flags and collation; notes what is missing."""
    s_sum, s_cnt, l_sum, _l_cnt, t_sum = _sums_of(d)
    zeros = np.zeros(len(prep))
    load = l_sum if l_sum is not None else zeros
    if l_sum is not None and src.has("detail"):
        # per-sample detail for a share of the batches (the detail budget): the others' load time is
        # estimated at the detail batches' load per sample (their items fall back to prep - collate below)
        det = src.cols(["detail"])["detail"].to_numpy(dtype=bool, na_value=False) & (_l_cnt > 0)
        n_det = float(np.nansum(n[det & have]))
        if det.any() and not det[have].all() and n_det > 0:
            load = np.where(det, load, float(np.nansum(load[det & have])) / n_det * n)
        del det
    items = load + (t_sum if t_sum is not None else zeros)
    if s_sum is not None:
        items = np.where(s_cnt > 0, s_sum, items)
    if s_sum is None and l_sum is None:
        missing.append("per-sample events (sample/load): the split of preprocessing into ops is unknown")
    del s_sum, s_cnt, l_sum, _l_cnt, t_sum, zeros
    collate = np.nan_to_num(_f64(src.cols(["collate_dur_ns"])["collate_dur_ns"]))
    prep_f = np.where(have, prep, np.nan)
    # a batch's items never take longer than its fetch less its collation: where they would (a batch without
    # per-sample records, estimated at the detail batches' cost a sample, which carries their records' own
    # cost and their contention), the fetch's measured time holds and the estimate is capped to it
    # (the same operations as items = where(items > 0, minimum(items, maximum(prep_f - collate, 0)), maximum(
    # prep_f - collate, 0)); other = maximum(prep_f - items - collate, 0), each temporary made once)
    room = prep_f - collate
    np.maximum(room, 0, out=room)
    pos = items > 0
    np.minimum(items, room, out=items)
    np.copyto(items, room, where=~pos)
    del room, pos
    other = prep_f - items
    del prep_f
    other -= collate
    np.maximum(other, 0, out=other)
    return items, load, (collate, other)


__all__ = ["MODEL_COLUMNS", "Observation", "RunTrace", "main_loader", "observe"]
