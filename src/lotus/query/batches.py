"""``load_batches``: one row per batch, keyed (rank, loader, epoch, batch_id), joining worker and main sides.

Batches are batches: a key is a row only if a ``fetch`` (successful or failed) was recorded for it, or
the training loop consumed it (main-only traces: worker files lost, original logs). Not rows, and so
in no statistic:

* *exhausted* keys: a worker's fetch found its IterableDataset exhausted (``exhausted`` event, or an
  ``arrive`` flagged ``ARRIVE_EXHAUSTED``): no data, no batch;
* keys that were only *dispatched*: torch hands out a few indices past the end of an IterableDataset
  (prefetch), and a loop that stops early leaves dispatched indices unprepared.

They stay countable: ``batches.attrs["exhausted"]`` (int), ``batches.attrs["exhausted_by_worker"]``
(``{"r0/w1": n}``) and ``batches.attrs["dispatched_without_batch"]`` (int); :func:`fetch_outcomes`
lists every exhausted and failed fetch of an events DataFrame, and :func:`outcome_summary` sums it all
up. A fetch that raised is a row with ``status == "failed"`` (``failed`` True): reported, but left out
of every timing statistic (:func:`ok_batches`).

Columns (absolute times are wall-clock epoch ns; nullable ``Int64`` where a side may be missing):

=================== =========================================================================
rank, loader, ...   the batch's key: rank, loader, epoch, batch_id
worker_id           worker that prepared it (-1: main process, num_workers=0)
worker_pid          its process id
dispatch_ns         main process handed the indices to the worker
dispatch_worker     worker the main process chose (equals worker_id)
prep_start_ns       worker received the indices (start of preprocessing)
prep_dur_ns         preprocessing time: fetch of all samples + collation
prep_end_ns         prep_start_ns + prep_dur_ns
n_samples           samples in the batch
collate_dur_ns      collate_fn time
put_dur_ns          time to put the batch on the result queue
failed              the fetch raised (worker, or the main process with num_workers=0)
status              "ok" or "failed" (category)
arrive_ns           main process received it (after pinning, when pin_memory=True)
pin_start_ns/       pin-memory thread time on it
pin_dur_ns
wait_start_ns/      training loop waited for it in __next__
wait_dur_ns
buffered            it had already arrived (out of order) when the loop asked for it
consumed_ns         handed to the training loop
step_dur_ns         loop held it until asking for the next batch (the "step")
delay_ns            consumed_ns - prep_end_ns: ready but not yet used
queue_ns            arrive_ns - prep_end_ns: in flight from worker to main
detail              the batch carries per-sample/per-op records (a detail batch: format >= 2 flags
                    it on its fetch; earlier traces: every batch with per-sample events)
runq_ns             the worker thread's time waiting for a CPU in the fetch (format >= 4, Linux; else NA)
prep_cpu_ns         the worker thread's time on a CPU during the fetch (format >= 4 on Linux)
disk_read_bytes     bytes the worker thread read from storage in the fetch (format >= 5, Linux)
=================== =========================================================================
"""

from __future__ import annotations

import logging
import os

import numpy as np

from lotus.trace import schema as S
from lotus.trace.events import load_events

_log = logging.getLogger("lotus.trace")
KEY = ["rank", "loader", "epoch", "batch_id"]

# event name -> {source column: batches column}
_PARTS: dict[str, dict[str, str]] = {
    "fetch": {"worker_id": "worker_id", "pid": "worker_pid", "start_ns": "prep_start_ns",
              "dur_ns": "prep_dur_ns", "arg": "_fetch_flags"},
    "exhausted": {"worker_id": "_exhausted_worker"},
    "dispatch": {"start_ns": "dispatch_ns", "arg": "dispatch_worker"},
    "arrive": {"start_ns": "arrive_ns", "arg": "_arrive_flags"},
    "pin": {"start_ns": "pin_start_ns", "dur_ns": "pin_dur_ns"},
    "wait": {"start_ns": "wait_start_ns", "dur_ns": "wait_dur_ns", "arg": "_wait_flags"},
    "consumed": {"start_ns": "consumed_ns"},
    "step": {"dur_ns": "step_dur_ns"},
    "gpu_wait": {"dur_ns": "gpu_wait_ns", "arg": "_gpu_wait_valid"},
    "gpu_step": {"dur_ns": "gpu_step_ns", "arg": "_gpu_step_valid"},
    "runq": {"dur_ns": "runq_ns", "arg": "prep_cpu_ns", "sample": "disk_read_bytes"},
}
_SUMS = {"collate": "collate_dur_ns", "put": "put_dur_ns"}

BATCH_COLUMNS = [
    *KEY, "worker_id", "worker_pid", "dispatch_ns", "dispatch_worker", "prep_start_ns", "prep_dur_ns",
    "prep_end_ns", "n_samples", "collate_dur_ns", "put_dur_ns", "failed", "status", "arrive_ns", "pin_start_ns",
    "pin_dur_ns", "wait_start_ns", "wait_dur_ns", "buffered", "consumed_ns", "step_dur_ns", "delay_ns",
    "queue_ns", "gpu_wait_ns", "gpu_step_ns", "detail", "runq_ns", "prep_cpu_ns", "disk_read_bytes",
]
STATUSES = ["ok", "failed"]
OUTCOME_COLUMNS = [*KEY, "worker_id", "pid", "outcome", "start_ns", "dur_ns"]


def batches_from_events(events):
    """Pure function: the events DataFrame -> the batches DataFrame (one row per batch; see the module doc)."""
    name_cat = events["name"].array
    codes = np.asarray(name_cat.codes)
    lookup = {str(c): i for i, c in enumerate(name_cat.categories)}
    has_batch = events["batch_id"].to_numpy() >= 0
    cols = [*KEY, "worker_id", "pid", "start_ns", "dur_ns", "arg", "sample"]
    frames = []

    def rows(name):
        code = lookup.get(name)
        if code is None:
            return None
        mask = (codes == code) & has_batch
        if not mask.any():
            return None
        return events.loc[mask, cols]

    for name, mapping in _PARTS.items():
        part = rows(name)
        if part is None:
            continue
        part = part[KEY + list(mapping)]
        dup = part.duplicated(KEY)
        if dup.any():
            _log.warning("%s: %d duplicate '%s' events for the same batch key ignored",
                         events.attrs.get("path", "trace"), int(dup.sum()), name)
            part = part[~dup]
        # nullable before the outer join: int64 -> float64 would lose nanoseconds
        frames.append(part.rename(columns=mapping).set_index(KEY).astype("Int64"))
    for name, col in _SUMS.items():
        part = rows(name)
        if part is not None:
            frames.append(part.groupby(KEY)["dur_ns"].sum().rename(col).astype("Int64").to_frame())
            if name == "collate":
                frames.append(part.groupby(KEY)["arg"].max().rename("_collate_n").astype("Int64").to_frame())
    for name in ("sample", "load"):
        part = rows(name)
        if part is not None:
            frames.append(part.groupby(KEY).size().rename(f"_n_{name}").astype("Int64").to_frame())
    if not frames:
        return empty_batches(events.attrs)
    df = frames[0].join(frames[1:], how="outer") if len(frames) > 1 else frames[0]
    del frames, part  # the parts: as large as the join again
    return batches_from_joined(df.reset_index(), events.attrs)


def empty_batches(attrs):
    import pandas as pd

    out = pd.DataFrame({c: pd.Series(dtype="Int64") for c in BATCH_COLUMNS})
    out["failed"] = out["failed"].astype(bool)
    out["detail"] = out["detail"].astype(bool)
    out["status"] = pd.Categorical([], categories=STATUSES)
    out.attrs.update(attrs)
    out.attrs.update(exhausted=0, exhausted_by_worker={}, dispatched_without_batch=0)
    return out


def warn_clock_skew(where: str, delays: int, queues: int) -> None:
    """One warning when batches reached the main process before their preparation ended (by the traces'
    clocks): delays and queue times of those batches are unknown."""
    if delays or queues:
        _log.warning("%s: %d batch(es) handed over before their preparation ended by the trace's clocks: the "
                     "processes' clocks disagree; their delay and queue times are left unknown", where,
                     max(delays, queues))


def batches_from_joined(df, attrs, *, only_batches: bool = True, warn_clocks: bool = True,
                        any_flagged: bool | None = None):
    """The batches DataFrame from the outer join of the per-event-kind parts on :data:`KEY` (KEY columns,
    then the columns of :data:`_PARTS`, :data:`_SUMS`, ``_collate_n``, ``_n_sample``/``_n_load`` of the
    kinds present, nullable Int64); ``attrs``: the events' attrs. Shared by :func:`batches_from_events`
    and the scan engine's :class:`lotus.query.batchtable.BatchTable` (whose rows are batches already:
    ``only_batches=False``, its counts in ``attrs``; it warns of clocks that disagree itself:
    ``warn_clocks=False``). ``any_flagged``: whether any fetch of the whole run is flagged a detail batch,
    where ``df`` holds only some of its rows (:meth:`lotus.query.batchtable.BatchTable.frames`); else
    ``df``'s own rows tell."""
    import pandas as pd

    if only_batches:
        df = _only_batches(df, attrs.get("path", "trace"))

    def col(name):
        return df[name] if name in df else pd.Series(pd.NA, index=df.index, dtype="Int64")

    out = pd.DataFrame(index=df.index)
    for c in KEY:
        out[c] = df[c].astype("int64")
    for c in ("worker_id", "worker_pid", "dispatch_ns", "dispatch_worker", "prep_start_ns", "prep_dur_ns"):
        out[c] = col(c).astype("Int64")
    out["prep_end_ns"] = out["prep_start_ns"] + out["prep_dur_ns"]
    n = col("_collate_n").astype("Int64")
    for alt in ("_n_sample", "_n_load"):
        n = n.where(n.notna() & (n > 0), col(alt).astype("Int64"))
    out["n_samples"] = n
    out["collate_dur_ns"] = col("collate_dur_ns").astype("Int64")
    out["put_dur_ns"] = col("put_dur_ns").astype("Int64")
    flags = col("_fetch_flags").astype("Int64")
    out["failed"] = (flags.fillna(0).clip(lower=0) & 1).astype(bool)  # -1: no flags (original logs)
    out["status"] = pd.Categorical.from_codes(out["failed"].to_numpy().astype(np.int8), categories=STATUSES)
    for c in ("arrive_ns", "pin_start_ns", "pin_dur_ns", "wait_start_ns", "wait_dur_ns"):
        out[c] = col(c).astype("Int64")
    wflags = col("_wait_flags").astype("Int64")
    out["buffered"] = (wflags.where(wflags >= 0) & 1).astype("boolean")
    out["consumed_ns"] = col("consumed_ns").astype("Int64")
    out["step_dur_ns"] = col("step_dur_ns").astype("Int64")
    delay, queue = out["consumed_ns"] - out["prep_end_ns"], out["arrive_ns"] - out["prep_end_ns"]
    # a batch handed over before it was ready: the main and worker processes' clocks disagree (files on
    # different clock domains): no delay or queue time, rather than a negative one
    out["delay_ns"], out["queue_ns"] = delay.where(~(delay < 0)), queue.where(~(queue < 0))
    if warn_clocks:
        warn_clock_skew(attrs.get("path", "trace"), int((delay < 0).sum()), int((queue < 0).sum()))
    for c, valid in (("gpu_wait_ns", "_gpu_wait_valid"), ("gpu_step_ns", "_gpu_step_valid")):
        v = col(c).astype("Int64")
        ok = col(valid).astype("Int64")
        out[c] = v.where(ok.fillna(1) != 0)
    # worker_id of batches seen only from the main side: the worker it was dispatched to
    out["worker_id"] = out["worker_id"].fillna(out["dispatch_worker"])
    # a detail batch carries per-sample/per-op records: flagged by its fetch (format >= 2), or any batch
    # with per-sample events (earlier formats, original logs: every batch; a scanned run keeps no per-sample
    # events, so a run without any flag counts every batch as detail, as detail_share does)
    has_samples = (col("_n_sample").fillna(0) > 0) | (col("_n_load").fillna(0) > 0)
    flagged = (flags.fillna(0).clip(lower=0) & S.FETCH_DETAIL) != 0
    if any_flagged is None:
        any_flagged = bool(flagged.any())
    out["detail"] = (flagged | has_samples | (not any_flagged)).astype(bool)
    for c in ("runq_ns", "prep_cpu_ns", "disk_read_bytes"):
        out[c] = col(c).astype("Int64")
    out["disk_read_bytes"] = out["disk_read_bytes"].where(out["disk_read_bytes"] >= 0)  # -1: format 4, or unknown
    joined_attrs = df.attrs
    df = n = flags = wflags = has_samples = flagged = v = ok = None  # the joined parts: freed before the copies below
    out = out[BATCH_COLUMNS]
    keys = [out[c].to_numpy() for c in KEY]
    if len(out) > 1 and not _sorted_keys(keys):  # the outer join sorts its keys: usually nothing to do
        out = out.sort_values(KEY, ignore_index=True)
    out.attrs.update(attrs)
    out.attrs.update(joined_attrs)
    return out


def _sorted_keys(keys) -> bool:
    """Whether the rows are in lexicographic order of the key columns (each a numpy array)."""
    le = np.ones(len(keys[0]) - 1, bool)  # row i <= row i+1 so far, decided by the earlier columns
    eq = np.ones(len(keys[0]) - 1, bool)
    for k in keys:
        a, b = k[:-1], k[1:]
        le &= ~eq | (a <= b)
        eq &= a == b
    return bool(le.all())


def _only_batches(df, where):
    """Rows of the joined parts that are batches (see the module doc); the others counted in ``attrs``."""
    row, attrs = batch_rows(df, where)
    kept = df.reset_index(drop=True) if row.all() else df[row].reset_index(drop=True)
    kept.attrs = attrs
    return kept


def batch_rows(df, where) -> tuple[np.ndarray, dict]:
    """(boolean mask of the keys that are batches, attrs counting the others) of joined parts ``df`` (only
    the columns ``rank``, ``_fetch_flags``, ``consumed_ns``, ``_arrive_flags``, ``_exhausted_worker``,
    ``dispatch_worker`` and ``dispatch_ns`` are read; absent ones are all-NA). See the module doc."""
    import pandas as pd

    def has(c):
        return df[c].notna().to_numpy(dtype=bool, na_value=False) if c in df else np.zeros(len(df), bool)

    fetched, consumed = has("_fetch_flags"), has("consumed_ns")
    arrive = df["_arrive_flags"] if "_arrive_flags" in df else pd.Series(pd.NA, index=df.index, dtype="Int64")
    flagged = ((arrive.fillna(0).clip(lower=0) & S.ARRIVE_EXHAUSTED) != 0).to_numpy(dtype=bool)
    exhausted = has("_exhausted_worker") | flagged
    row = fetched | consumed
    odd = row & exhausted
    if odd.any():
        _log.warning("%s: %d batch key(s) both exhausted and fetched/consumed; kept as batches", where,
                     int(odd.sum()))
    gone = exhausted & ~row
    ex = df[gone]
    who = ex["_exhausted_worker"] if "_exhausted_worker" in ex else pd.Series(pd.NA, index=ex.index, dtype="Int64")
    if "dispatch_worker" in ex:
        who = who.fillna(ex["dispatch_worker"])
    by_worker: dict[str, int] = {}
    for r, w in zip(ex["rank"].tolist(), who.fillna(-1).astype("int64").tolist(), strict=True):
        label = worker_label(r, w)
        by_worker[label] = by_worker.get(label, 0) + 1
    rest = ~row & ~exhausted
    dispatched = rest & has("dispatch_ns")
    if (rest & ~dispatched).any():
        _log.info("%s: %d batch key(s) with events but neither a fetch nor a consumption (a process killed "
                  "mid-batch?) are not batches", where, int((rest & ~dispatched).sum()))
    return row, {"exhausted": int(gone.sum()), "exhausted_by_worker": dict(sorted(by_worker.items())),
                 "dispatched_without_batch": int(dispatched.sum())}


def worker_label(rank: int, worker: int) -> str:
    """``r0/w1`` (a worker) or ``r0/main`` (the main process, num_workers=0)."""
    return f"r{int(rank)}/{'main' if int(worker) < 0 else 'w' + str(int(worker))}"


def load_batches(path: str | os.PathLike):
    """One row per batch of the run at ``path`` (see the module doc for the columns)."""
    return batches_from_events(load_events(path))


def consumed_only(batches):
    """The batches the training loop actually received (rows with ``consumed_ns``)."""
    return batches[batches["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]


def failed_mask(batches) -> np.ndarray:
    """Boolean mask of the failed batches (all False for a frame without a ``failed`` column)."""
    if "failed" not in batches:
        return np.zeros(len(batches), bool)
    return batches["failed"].to_numpy(dtype=bool, na_value=False)


def ok_batches(batches):
    """The batches whose fetch did not raise (``status == "ok"``): the ones timing statistics use."""
    return batches[~failed_mask(batches)]


__all__ = ["BATCH_COLUMNS", "KEY", "OUTCOME_COLUMNS", "STATUSES", "batches_from_events", "consumed_only",
           "failed_mask", "load_batches", "ok_batches", "worker_label"]
