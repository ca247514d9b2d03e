"""``load_batches``: one row per (rank, loader, epoch, batch_id), joining worker and main sides.

Columns (absolute times are wall-clock epoch ns; nullable ``Int64`` where a side may be missing):

=================== =========================================================================
rank, loader,       the batch's key
epoch, batch_id
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
failed              the worker raised while preparing it
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
=================== =========================================================================
"""

from __future__ import annotations

import logging
import os

from lotus.trace.events import load_events

_log = logging.getLogger("lotus.trace")
KEY = ["rank", "loader", "epoch", "batch_id"]

# event name -> {source column: batches column}
_PARTS: dict[str, dict[str, str]] = {
    "fetch": {"worker_id": "worker_id", "pid": "worker_pid", "start_ns": "prep_start_ns",
              "dur_ns": "prep_dur_ns", "arg": "_fetch_flags"},
    "dispatch": {"start_ns": "dispatch_ns", "arg": "dispatch_worker"},
    "arrive": {"start_ns": "arrive_ns"},
    "pin": {"start_ns": "pin_start_ns", "dur_ns": "pin_dur_ns"},
    "wait": {"start_ns": "wait_start_ns", "dur_ns": "wait_dur_ns", "arg": "_wait_flags"},
    "consumed": {"start_ns": "consumed_ns"},
    "step": {"dur_ns": "step_dur_ns"},
    "gpu_wait": {"dur_ns": "gpu_wait_ns", "arg": "_gpu_wait_valid"},
    "gpu_step": {"dur_ns": "gpu_step_ns", "arg": "_gpu_step_valid"},
}
_SUMS = {"collate": "collate_dur_ns", "put": "put_dur_ns"}

BATCH_COLUMNS = [
    *KEY, "worker_id", "worker_pid", "dispatch_ns", "dispatch_worker", "prep_start_ns", "prep_dur_ns",
    "prep_end_ns", "n_samples", "collate_dur_ns", "put_dur_ns", "failed", "arrive_ns", "pin_start_ns",
    "pin_dur_ns", "wait_start_ns", "wait_dur_ns", "buffered", "consumed_ns", "step_dur_ns", "delay_ns",
    "queue_ns", "gpu_wait_ns", "gpu_step_ns",
]


def batches_from_events(events):
    """Pure function: the events DataFrame -> the batches DataFrame (one row per batch)."""
    import numpy as np
    import pandas as pd

    name_cat = events["name"].array
    codes = np.asarray(name_cat.codes)
    lookup = {str(c): i for i, c in enumerate(name_cat.categories)}
    has_batch = events["batch_id"].to_numpy() >= 0
    cols = [*KEY, "worker_id", "pid", "start_ns", "dur_ns", "arg"]
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
        return pd.DataFrame({c: pd.Series(dtype="Int64") for c in BATCH_COLUMNS})
    df = frames[0].join(frames[1:], how="outer") if len(frames) > 1 else frames[0]
    df = df.reset_index()

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
    for c in ("arrive_ns", "pin_start_ns", "pin_dur_ns", "wait_start_ns", "wait_dur_ns"):
        out[c] = col(c).astype("Int64")
    wflags = col("_wait_flags").astype("Int64")
    out["buffered"] = (wflags.where(wflags >= 0) & 1).astype("boolean")
    out["consumed_ns"] = col("consumed_ns").astype("Int64")
    out["step_dur_ns"] = col("step_dur_ns").astype("Int64")
    out["delay_ns"] = out["consumed_ns"] - out["prep_end_ns"]
    out["queue_ns"] = out["arrive_ns"] - out["prep_end_ns"]
    for c, valid in (("gpu_wait_ns", "_gpu_wait_valid"), ("gpu_step_ns", "_gpu_step_valid")):
        v = col(c).astype("Int64")
        ok = col(valid).astype("Int64")
        out[c] = v.where(ok.fillna(1) != 0)
    # worker_id of batches seen only from the main side: the worker it was dispatched to
    out["worker_id"] = out["worker_id"].fillna(out["dispatch_worker"])
    out = out.sort_values(KEY, ignore_index=True)
    out.attrs.update(events.attrs)
    return out[BATCH_COLUMNS]


def load_batches(path: str | os.PathLike):
    """One row per batch of the run at ``path`` (see the module doc for the columns)."""
    return batches_from_events(load_events(path))


def consumed_only(batches):
    """The batches the training loop actually received (rows with ``consumed_ns``)."""
    return batches[batches["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]


__all__ = ["BATCH_COLUMNS", "KEY", "batches_from_events", "consumed_only", "load_batches"]
