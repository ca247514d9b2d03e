"""``whatif``: a run directory -> the what-if tables of ``lotus whatif`` (a pure result, no printing)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from lotus.errors import InputError
from lotus.model.params import PipelineModel


@dataclass
class WhatIf:
    model: PipelineModel
    predictions: object  # DataFrame, lotus.model.tables.TABLE_COLUMNS
    measured: dict
    cache: object | None = None  # DataFrame: steady hit rates per policy and size, with predictions
    cache_epochs: object | None = None  # DataFrame: hit rates per epoch
    dataset: dict | None = None
    notes: list[str] = field(default_factory=list)
    check: object | None = None  # lotus.model.check.ModelCheck: each run by the model of the others (several runs)

    def to_dict(self) -> dict:
        def records(df):
            return None if df is None else df.replace({np.nan: None}).to_dict(orient="records")

        out = {"predictions": records(self.predictions), "measured": self.measured, "model": self.model.to_dict(),
               "cache": records(self.cache), "dataset": self.dataset, "notes": self.notes}
        if self.check is not None:
            out["check"] = self.check.to_dict()
        return out


def whatif(data_dir: str | os.PathLike, *, workers=None, cpus=None, batch_size: int | None = None, cache_gb=None,
           dataset_bytes: float | None = None, data: str | os.PathLike | None = None, epochs: int = 3,
           cold_dir: str | os.PathLike | None = None, io_mb_s: float | None = None,
           main_cpu_cores: float = 1.0, replay_s: float = 1.0, shm_probe: bool = True, more_dirs=()) -> WhatIf:
    """Fit the run at ``data_dir`` (plus a cold-cache run) and predict the grid (see docs/model.md).
    ``more_dirs``: other runs of the same job (other worker counts, CPUs): one model of them all, and each
    run checked by the model of the others (:func:`lotus.model.check.check_probes`); the first run stays the
    traced setting the table and the cache what-if start from. With
    ``data`` (the dataset's files) and a trace whose workers read from storage, the files are read at each
    worker count for ``replay_s`` seconds (:mod:`lotus.model.storage`; 0: not). A num_workers=0 trace that
    recorded its batches' bytes predicts workers with the worker path's cost per byte measured on this
    machine (:mod:`lotus.profile.shmprobe`; ``shm_probe=False``: not)."""
    from lotus.model.accessorder import access_order
    from lotus.model.cache import DEFAULT_FRACTIONS, steady_hit_rates
    from lotus.model.fitting import fit, forget_observation, load_run
    from lotus.model.observation import MODEL_COLUMNS
    from lotus.model.tables import (
        GB,
        cache_hits,
        cache_throughput,
        dataset_bytes_of,
        default_grid,
        hit_rate_at,
        prediction_table,
    )
    from lotus.trace.original import release_freed_memory

    run = load_run(data_dir, columns=MODEL_COLUMNS)  # the batches' columns the fit reads (a scanned run)
    warm = [run, *(load_run(d, columns=MODEL_COLUMNS) for d in more_dirs)]
    cold = [load_run(cold_dir, cache_state="cold", columns=MODEL_COLUMNS)] if cold_dir is not None else []
    runs = warm + cold
    notes: list[str] = []
    dataset = None
    n_samples = _dataset_len(run)
    paths: list[str] = []
    if data is not None:
        dataset = dataset_bytes_of(data, n_samples)
        paths = dataset.pop("paths")
    elif dataset_bytes is not None:
        if dataset_bytes <= 0:
            raise InputError(f"--dataset-bytes must be > 0, not {dataset_bytes:g}")
        dataset = {"dataset_bytes": float(dataset_bytes),
                   "bytes_per_sample": float(dataset_bytes) / n_samples if n_samples else None}
    bps = dataset["bytes_per_sample"] if dataset else None
    io = io_mb_s * 1e6 if io_mb_s else None
    per_epoch = None
    if dataset is not None:
        # the cache what-if's hit rates need no model: simulated first, so that its access order and simulation
        # (O(dataset)) are freed before the fit's per-batch arrays (O(batches)) are made: the peak is the larger
        # of the two, not their sum (the same numbers: the simulation's seed is fixed)
        extra = [min(g * GB / dataset["dataset_bytes"], 1.0) for g in (cache_gb or [])]
        order = access_order(run, epochs, n_samples)  # the simulated epochs' orders only (flat in the run's length)
        per_epoch = cache_hits(order, n_samples, fractions=sorted({*DEFAULT_FRACTIONS, *extra}), n_epochs=epochs)
        del order
        release_freed_memory()
    model = fit(runs, main_cpu_cores=main_cpu_cores, io_bytes_per_s=io, bytes_per_sample=bps)
    check = None
    if len(warm) > 1:
        check = _check_runs(model, warm, lambda rs: fit(rs + cold, main_cpu_cores=main_cpu_cores,
                                                        io_bytes_per_s=io, bytes_per_sample=bps), shm_probe)
        notes += check.notes
    for r in runs:  # fitted once: the observations' per-batch arrays the model does not share are freed
        forget_observation(r)
    release_freed_memory()
    t = model.traced
    traced = model.predict(t.num_workers, t.cpus)
    if traced.samples_per_s is None:
        raise InputError(f"cannot model this run: {traced.reason}", data_dir)
    grid_w, grid_c = default_grid(model)
    workers = list(workers) if workers else grid_w
    if t.disk_bytes_per_sample:
        if data is not None and replay_s > 0:
            from lotus.model.storage import scale_by_replay

            notes += scale_by_replay(model, paths, workers, seconds=replay_s)
        else:
            notes.append(f"the traced run's workers read {t.disk_bytes_per_sample / 1e3:,.0f} kB a sample from "
                         f"storage ({100 * (t.io_wait_share or 0):.0f}% of a fetch waiting for it): predictions "
                         "keep that time per batch at every worker count, which the storage may not give more "
                         "(or fewer) workers; --data DIR reads the dataset's files at each count to measure it")
    if t.num_workers == 0 and any(w > 0 for w in workers) and shm_probe:
        from lotus.model.workerpath import price

        price(model, batch_size)
    cpus = [float(c) for c in cpus] if cpus else grid_c
    cache_rows, steady = None, None
    if dataset is None:
        if cache_gb:
            notes.append("cache predictions skipped: the dataset's size is unknown (--dataset-bytes or --data)")
    else:
        total = dataset["dataset_bytes"]
        if per_epoch is None:
            notes.append("cache what-if skipped: the trace records no sample indices (original LotusTrace logs)")
        else:
            per_epoch["cache_bytes"] = per_epoch["cache_frac"] * total
            steady = steady_hit_rates(per_epoch)
            steady["cache_gb"] = steady["cache_frac"] * total / GB
            steady = cache_throughput(model, steady, batch_size=batch_size)
            if cache_gb:
                cache_rows = [(float(g), hit_rate_at(steady, g, total)) for g in cache_gb]
    table = prediction_table(model, workers, cpus, cache=cache_rows, batch_size=batch_size)
    measured = {"num_workers": t.num_workers, "cpus": t.cpus, "batch_size": t.batch_size,
                "prefetch_factor": t.prefetch_factor, "samples_per_s": t.samples_per_s,
                "ci95": list(t.samples_per_s_ci95) if t.samples_per_s_ci95 else None,
                "note": t.samples_per_s_note, "wait_share": t.wait_share,
                "predicted_samples_per_s": traced.samples_per_s, "predicted_wait_share": traced.wait_share,
                "bottleneck": traced.bottleneck}
    if t.samples_per_s:
        from lotus.model.check import SLACK, tolerance

        err = traced.samples_per_s / t.samples_per_s - 1.0
        tol = tolerance(t.samples_per_s, t.samples_per_s_ci95)
        measured.update(error=err, tolerance=tol, disagrees=abs(err) > tol)
        if abs(err) > tol:
            notes.append(f"the model does not reproduce the traced run: {traced.samples_per_s:,.1f} samples/s "
                         f"predicted against {t.samples_per_s:,.1f} measured ({err:+.0%}, more than the "
                         f"measurement's interval +{SLACK:.0%}): its other predictions are not to be trusted for "
                         "this job; probe them (lotus tune, lotus sensitivity)")
        elif check is None:
            notes.append(f"checked against the traced run only ({err:+.1%}, in sample): predictions for other "
                         "settings carry no interval; lotus tune and lotus sensitivity check them against probes")
        elif check.prediction_interval is not None:
            notes.append(f"each run predicted by the model of the others: worst {check.prediction_interval:.0%} "
                         f"(the model of them all {'holds' if check.holds else 'does not hold'} for this job; "
                         "the predictions' interval for other settings" + (
                             "; of two runs, each model is of one run, which cannot fit what differs between them"
                             if len(warm) == 2 else "") + ")")
    if t.num_workers == 0 and any(w > 0 for w in workers):
        notes += _worker_path(model, shm_probe)
    notes += _slicing_note(model, table)
    notes += _queue_note(model, workers)
    return WhatIf(model=model, predictions=table, measured=measured, cache=steady, cache_epochs=per_epoch,
                  dataset=dataset, notes=notes + model.notes, check=check)


def _check_runs(model, runs, fit_runs, shm_probe: bool):
    """Each of several runs predicted by the model of the others, against its own measured rate."""
    from lotus.model.check import Probe, check_probes

    def fit(rs):
        m = fit_runs(rs)
        if shm_probe:
            from lotus.model.workerpath import price

            price(m)
        return m

    def predict(m, key):
        return m.predict(*key).samples_per_s

    probes = [Probe(name=f"{s.num_workers} workers, {s.cpus:g} CPUs" if s.cpus else f"{s.num_workers} workers",
                    run=r, samples_per_s=s.samples_per_s, ci95=s.samples_per_s_ci95, key=(s.num_workers, s.cpus),
                    note=s.samples_per_s_note)
              for r, s in zip(runs, model.runs[:len(runs)], strict=True) if s.samples_per_s]
    return check_probes(probes, fit, predict)


def _slicing_note(model, table) -> list[str]:
    """Where the table holds bounds (:func:`lotus.model.engine.slicing_bound`: rows that time-slice their CPUs
    at another level than the runs, whose cost none of them fitted), why."""
    if "bound" not in table or not table["bound"].notna().any():
        return []
    t = model.traced
    traced = t.cpu_stretch if t.num_workers > 0 and t.cpu_stretch else 1.0
    return [f"beyond the CPUs (more runnable than CPUs: workers time-sliced): one run cannot tell what the slicing "
            f"itself costs (caches refilled at every turn: +26% CPU a batch for JPEG-decoding workers on the GPU "
            f"host from 8 to 16 workers on 4 CPUs, none for small Python samples), so predictions at another level "
            f"of it (traced {traced:.2g} runnable a CPU) take it as free: a rate marked <= is at most that, >= at "
            f"least; a second run at another worker count (lotus whatif -d RUN -d RUN2) fits it"]


def _queue_note(model, workers) -> list[str]:
    """Where predictions need the hand-offs' head-of-line part and no run told it
    (:func:`lotus.model.handoff_fit.unseen_queue`), which ones and why."""
    from lotus.model.handoff_fit import unseen_queue

    unseen = sorted({int(w) for w in workers if unseen_queue(model, int(w))})
    if not unseen:
        return []
    return [f"at {', '.join(map(str, unseen))} workers each worker prepares more of an epoch's "
            f"{model.epoch_batches} batches than in any traced run, so more batches wait behind a busy worker's "
            "hand-off (the main process receives them in the order they were put); the traced runs never showed "
            "that wait, so these predictions leave it out and can be off either way (issue 24, from 8 workers' traces "
            "of 16-batch epochs: 4 workers +21% to +46% on the GPU host; 2 and 4 workers -19% / -11% on a 2-CPU "
            "VM); a run or probe at fewer workers "
            "(lotus whatif -d RUN -d RUN2, lotus tune) measures it"]


def _worker_path(model, probed: bool) -> list[str]:
    """The note of a num_workers=0 trace predicting workers: what of the worker path the predictions price."""
    t = model.traced
    said = ("predictions with workers read high (issue 24's corpus: +8% on this VM's CPU-bound job, +21-61% on "
            "the GPU host's ResNet-18 at 8 workers, against the job alone, docs/results/corpus.md; there already "
            "+31% at 2 workers (the job alone's interval +-24%): a sample took 3.2 ms in the loop's thread and 4.1 ms "
            "in a worker, and neither "
            "torch's threads, fork nor contention explained it, docs/results/gpu-h200/issue-24/nw0-cause/); a probe "
            "with workers (lotus tune, lotus sensitivity) measures it")
    if model.shm_ns_per_byte and t.batch_bytes:
        write, touch = model.worker_path_ns(1, t.batch_size)
        return [f"traced with num_workers=0: a worker's collation into shared memory and the main process's "
                f"first touch of it priced from the batch's {t.batch_bytes / 1e6:,.3g} MB at this machine's cost "
                f"(+{write / 1e6:,.3g} ms and +{touch / 1e6:,.3g} ms a batch, lotus.profile.shmprobe); the rest "
                "of the worker path (its queue, the main process's receive) is not in this trace and is taken "
                "as free: " + said]
    why = ("its batches' bytes are not in this trace (format < 6)" if not t.batch_bytes else
           "shared memory could not be probed here" if probed else "not probed (--no-shm-probe)")
    return ["traced with num_workers=0: the worker path (the batch into shared memory, the main process's "
            f"receive) is not in this trace and is taken as free ({why}), so " + said]


def _dataset_len(run) -> int | None:
    """Samples in the dataset of the run's main loader, from its description (None: not recorded)."""
    from lotus.model.batchsource import columns_of
    from lotus.model.observation import main_loader

    b = run.batches if getattr(run, "table", None) is None else columns_of(run, ["loader"])
    if b is None or len(b) == 0:
        return None
    loader = main_loader(b)
    for (_rank, lo), desc in sorted(run.loaders.items()):
        n = desc.get("dataset_len") if lo == loader and isinstance(desc, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    return None


__all__ = ["WhatIf", "whatif"]
