"""Time windows and overviews of long runs, for viewing (``lotus viz --window`` / ``--overview``).

* :func:`parse_window` turns ``START:END`` (seconds from the run's first event; either side may be
  empty) or ``eA:eB`` / ``eA`` (epochs A to B, both included) into wall-clock ns, given the run's
  batch-level events; a window outside the run raises :class:`WindowError`.
* :func:`window_events` keeps the events that overlap the window, exactly (a slice that starts before
  the window and ends inside it is kept whole). On a scanned run (:mod:`lotus.query.scan`) the files
  are read again in chunks and only those events are kept, so memory follows the window.
* :func:`overview` aggregates a whole run per time bucket from its batches: each worker's busy share
  (preprocessing time inside the bucket / bucket length) and the loop's wait share; a few thousand
  buckets make a Perfetto file of a few MB whatever the run's length (:func:`write_overview`).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from lotus.errors import LotusError

_EPOCHS = re.compile(r"^e(?:poch)?(\d+)(?::e?(?:poch)?(\d+))?$")


class WindowError(LotusError):
    """A window that is malformed or outside the run."""


def _folded_extent(events) -> dict[int, list[int]]:
    """``{epoch: [first start, last end]}`` of a scanned run's batch-level events that were folded into
    its batches rather than kept as rows (:mod:`lotus.query.batchparts`); empty otherwise."""
    return getattr(events.attrs.get("op_engine"), "folded_extent", None) or {}


def run_span(events, epochs: tuple[int, int] | None = None) -> tuple[int, int]:
    """First start and last end (wall-clock ns) of every event of the run, or of epochs ``a..b``
    (both included); a scanned run's folded batch-level events count as if they were rows."""
    start = events["start_ns"].to_numpy()
    end = start + np.maximum(events["dur_ns"].to_numpy(), 0)
    if epochs is not None:
        ep = events["epoch"].to_numpy()
        sel = (ep >= epochs[0]) & (ep <= epochs[1])
        start, end = start[sel], end[sel]
    lo, hi = ([int(start.min())], [int(end.max())]) if len(start) else ([], [])
    for e, (s, t) in _folded_extent(events).items():
        if epochs is None or epochs[0] <= e <= epochs[1]:
            lo.append(s)
            hi.append(t)
    return min(lo), max(hi)


def parse_window(text: str, events) -> tuple[int, int]:
    """``(t0, t1)`` wall-clock ns of a ``--window`` (see the module doc)."""
    t_start, t_end = run_span(events)
    text = text.strip().lower()
    m = _EPOCHS.match(text)
    if m:
        a = int(m[1])
        b = int(m[2]) if m[2] is not None else a
        have = np.union1d(events["epoch"].to_numpy(), np.array(list(_folded_extent(events)), np.int64))
        if not ((have >= a) & (have <= b)).any():
            raise WindowError(f"epochs {a}-{b} are not in this run (it has epochs {int(have.min())}-{int(have.max())})")
        return run_span(events, (a, b))
    try:
        lo, hi = text.split(":")
        s0 = float(lo) if lo else 0.0
        s1 = float(hi) if hi else (t_end - t_start) / 1e9
    except ValueError:
        raise WindowError(f"--window {text!r}: expected START:END in seconds (e.g. 3600:3660) or epochs "
                          "(e2 or e2:e4)") from None
    length = (t_end - t_start) / 1e9
    if s1 <= s0 or s0 >= length or s1 <= 0:
        raise WindowError(f"--window {text}: outside the run, which lasts {length:.6g} s "
                          f"(seconds from its first event)")
    return t_start + int(s0 * 1e9), t_start + int(s1 * 1e9)


def _overlap(start: np.ndarray, dur: np.ndarray, t0: int, t1: int) -> np.ndarray:
    end = start + np.maximum(dur, 0)
    return (start < t1) & ((end > t0) | ((dur <= 0) & (start >= t0)))


def window_events(events, t0: int, t1: int):
    """The events overlapping ``[t0, t1)`` (see the module doc); ``events`` of either engine."""
    engine = events.attrs.get("op_engine")
    if engine is None:
        keep = _overlap(events["start_ns"].to_numpy(), events["dur_ns"].to_numpy(), t0, t1)
        return events[keep]
    from lotus.query import window_scan
    from lotus.trace.discover import FileList

    out = window_scan(engine, t0, t1, name=events.attrs.get("run"), path=events.attrs.get("path"))
    out.attrs["files"] = FileList(events.attrs.get("files", []))
    return out


def window_batches(batches, t0: int, t1: int):
    """Batches with any of their times inside the window (their flow arrows are drawn)."""
    ok = np.zeros(len(batches), bool)
    for c in ("prep_start_ns", "prep_end_ns", "consumed_ns", "wait_start_ns"):
        v = batches[c].to_numpy(dtype=np.float64, na_value=np.nan)
        ok |= (v >= t0) & (v < t1)
    return batches[ok]


# the batch columns overview reads: a scanned run's frame is made of these only
OVERVIEW_COLUMNS = ["rank", "worker_id", "failed", "dispatch_ns", "prep_start_ns", "prep_dur_ns", "wait_start_ns",
                    "wait_dur_ns"]


def overview(batches, bucket_ns: int):
    """One row per (bucket, track): ``t_ns`` (bucket start), ``track`` (``r0/w1`` or ``r0 loop wait``),
    ``share`` (busy or waiting share of the bucket). Reads the columns :data:`OVERVIEW_COLUMNS`, each
    group's rows one group at a time (no copy of the whole frame)."""
    import pandas as pd

    from lotus.query import failed_mask, worker_label

    parts = []
    cols = ["t_ns", "track", "share"]
    firsts = []
    for c in ("prep_start_ns", "wait_start_ns", "dispatch_ns"):
        v = batches[c].to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isfinite(v).any():
            firsts.append(np.nanmin(v))
        del v
    if not firsts:  # no batch: no track
        return pd.DataFrame(columns=cols)
    t_start = int(min(firsts))

    def add(label, start, dur):
        s = start.to_numpy(np.int64) - t_start
        e = s + dur.to_numpy(np.int64)
        busy = _busy_per_bucket(s, e, bucket_ns)
        parts.append(pd.DataFrame({"t_ns": t_start + np.arange(len(busy), dtype=np.int64) * bucket_ns,
                                   "track": label, "share": busy / bucket_ns}))

    # the prepared batches (lotus.analysis.stats.prepared), per (rank, worker)
    ok = batches["prep_dur_ns"].notna().to_numpy(dtype=bool, na_value=False) & ~failed_mask(batches)
    b = batches.loc[ok, ["rank", "worker_id", "prep_start_ns", "prep_dur_ns"]]
    b["worker_id"] = b["worker_id"].fillna(-1)
    for (r, w), g in b.groupby(["rank", "worker_id"]):
        add(worker_label(r, w), g["prep_start_ns"], g["prep_dur_ns"])
    del b
    w = batches.loc[batches["wait_dur_ns"].notna().to_numpy(dtype=bool, na_value=False),
                    ["rank", "wait_start_ns", "wait_dur_ns"]]
    for r, g in w.groupby("rank"):
        add(f"r{int(r)} loop wait", g["wait_start_ns"], g["wait_dur_ns"])
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def _busy_per_bucket(s: np.ndarray, e: np.ndarray, bucket: int) -> np.ndarray:
    """Time covered by the intervals ``[s, e)`` in each bucket (intervals of one track may overlap:
    a worker's fetches do not, waits do not)."""
    if not len(s):
        return np.zeros(0)
    n = int(e.max() // bucket) + 1
    out = np.zeros(n)
    first, last = s // bucket, np.maximum(e - 1, s) // bucket
    same = first == last
    np.add.at(out, first[same], (e - s)[same].astype(np.float64))
    f, la, ss, ee = first[~same], last[~same], s[~same], e[~same]
    np.add.at(out, f, ((f + 1) * bucket - ss).astype(np.float64))
    np.add.at(out, la, (ee - la * bucket).astype(np.float64))
    span = la - f - 1
    if (span > 0).any():  # intervals longer than a bucket: the buckets in between are full
        diff = np.zeros(n + 1)
        np.add.at(diff, f[span > 0] + 1, 1.0)
        np.add.at(diff, la[span > 0], -1.0)
        out += np.cumsum(diff)[:n] * bucket
    return out


def write_overview(table, out: str | os.PathLike, *, run_name: str = "run") -> int:
    """Chrome Trace Event JSON counters (one track per worker and per rank's loop wait); events written."""
    import gzip
    from pathlib import Path

    out = Path(out)
    base = int(table["t_ns"].min()) // 1_000_000_000 * 1_000_000_000 if len(table) else 0
    tracks = {t: i for i, t in enumerate(dict.fromkeys(table["track"]))}
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{run_name} overview"}}]
    for t, ts, share in zip(table["track"], table["t_ns"], table["share"], strict=True):
        evs.append({"ph": "C", "pid": 1, "tid": tracks[t], "name": t, "ts": round((int(ts) - base) / 1000, 3),
                    "args": {"share": round(float(share), 4)}})
    doc = {"traceEvents": evs, "baseTimeNanoseconds": base, "displayTimeUnit": "ms"}
    opener = gzip.open if out.suffix == ".gz" else open
    with opener(out, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    return len(evs)
