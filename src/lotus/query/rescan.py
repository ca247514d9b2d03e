"""Second passes of the out-of-core engine (:mod:`lotus.query.scan`) over a scanned run's files.

* :func:`rescan_ops`: per-op moments without the events of some batch keys (failed and exhausted
  fetches, outliers), made only when there are such keys;
* :func:`sample_counts` / :func:`batches_of_scan`: ``n_samples`` of batches that have no collate;
* :func:`window_scan`: every event overlapping a time window (``lotus viz --window``);
* :func:`export_events`: every event to Parquet, chunk by chunk (``lotus export``).

Each reads the files again in chunks: memory follows the result, not the run.

``engine`` is the run's :class:`lotus.query.opengine.OpEngine` everywhere here (not imported: the engine calls
these functions, which import nothing of it: no cycle, even for type checkers).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lotus.query.moments import _Moments
from lotus.trace import schema as S
from lotus.trace.chunks import ROLES, record_chunks
from lotus.trace.chunks import legacy_fetch as _legacy_fetch
from lotus.trace.discover import FileList, Run


def sample_counts(engine, keys) -> dict:
    """``{"sample": Series, "load": Series}``: per-sample events of the batch keys ``keys`` (a frame with
    rank, loader, epoch, batch_id), counted by one more scan; only batches without a collate need it."""
    import pandas as pd

    want = set(map(tuple, keys[["rank", "loader", "epoch", "batch_id"]].to_numpy(np.int64).tolist()))
    ids = np.unique(keys["batch_id"].to_numpy(np.int64))
    by_name = {n: i for i, n in enumerate(engine.names)}
    found: dict[tuple, list[int]] = {}
    spans: dict = {}
    for p in engine.paths:
        for arr, code, fs in record_chunks(p, engine.offsets, engine.loader_offsets.get(p, 0),
                                     lambda n, c: by_name.get(n, 0), spans=spans):
            sel = ((code == S.EV_SAMPLE) | (code == S.EV_LOAD)) & np.isin(arr["batch_id"], ids)
            lo = arr["loader"].astype(np.int64) + fs.loader_offset
            for i in np.flatnonzero(sel).tolist():
                key = (fs.consts["rank"], int(lo[i]), int(arr["epoch"][i]), int(arr["batch_id"][i]))
                if key in want:
                    found.setdefault(key, [0, 0])[0 if code[i] == S.EV_SAMPLE else 1] += 1
    idx = pd.MultiIndex.from_tuples(list(found), names=["rank", "loader", "epoch", "batch_id"])
    v = np.array(list(found.values()), np.int64).reshape(-1, 2)
    return {"sample": pd.Series(v[:, 0], index=idx), "load": pd.Series(v[:, 1], index=idx)}


def batches_of_scan(events):
    """The batches DataFrame of a scanned run: from its folded batch-level events
    (:meth:`lotus.query.batchtable.BatchTable.frame`), or :func:`lotus.query.batches.batches_from_events`
    on the kept events where the scan kept them as rows, plus ``n_samples`` of batches without a
    collate from their per-sample events."""
    from lotus.query.batches import batches_from_events

    engine = events.attrs.get("op_engine")
    table = getattr(engine, "batch_table", None)
    if table is not None:
        return table.frame()
    out = batches_from_events(events)
    if engine is not None:
        fill_sample_counts(engine, out)
    return out


def fill_sample_counts(engine, out, counts: dict | None = None) -> None:
    """``n_samples`` of the batches without a collate, from their per-sample events (another scan; or
    ``counts``, :func:`sample_counts` of keys that include them, counted once for several frames)."""
    from lotus.query.batches import KEY

    missing = out["n_samples"].isna().to_numpy()
    if not missing.any():
        return
    if counts is None:
        counts = sample_counts(engine, out.loc[missing, KEY])
    idx = out.loc[missing].set_index(KEY).index
    n = None
    for what in ("sample", "load"):
        c = counts[what].reindex(idx).to_numpy(dtype=np.float64)
        c = np.where(c > 0, c, np.nan)
        n = c if n is None else np.where(np.isnan(n), c, n)
    col = out["n_samples"].copy()
    col[missing] = [None if np.isnan(x) else int(x) for x in n]
    out["n_samples"] = col.astype("Int64")


def _exclusion(engine, exclude_keys):
    """(batch ids, key set) of the excluded batch keys; empty when none."""
    if exclude_keys is None or not len(exclude_keys):
        return np.zeros(0, np.int64), set()
    ex = exclude_keys[["rank", "loader", "epoch", "batch_id"]].drop_duplicates()
    return np.unique(ex["batch_id"].to_numpy(np.int64)), set(map(tuple, ex.to_numpy(np.int64).tolist()))


def op_chunks(engine, exclude_keys):
    """Yield ``(arr, slot, keep, fs)`` per chunk: each event's op slot (-1: not an op) and whether it
    counts (an op outside the excluded batch keys)."""
    ids, want = _exclusion(engine, exclude_keys)
    by_name = {n: i for i, n in enumerate(engine.names)}
    slot_of = np.full(S.MAX_NAME_ID + 1 + 1024, -1, np.int32)
    for k, c in enumerate(engine.slot_codes):
        slot_of[c] = k

    def code_of(name, cat):
        return by_name.get(name, len(slot_of) - 1)

    spans: dict = {}
    for p in engine.paths:
        for arr, code, fs in record_chunks(p, engine.offsets, engine.loader_offsets.get(p, 0), code_of,
                                     spans=spans):
            code, _, _ = _legacy_fetch(arr, code)
            slot = slot_of[code]
            keep = slot >= 0
            bid = arr["batch_id"]
            cand = keep & np.isin(bid, ids) if len(ids) else np.zeros(len(arr), bool)
            if cand.any():
                lo = arr["loader"].astype(np.int64) + fs.loader_offset
                ep = arr["epoch"]
                for i in np.flatnonzero(cand).tolist():
                    if (fs.consts["rank"], int(lo[i]), int(ep[i]), int(bid[i])) in want:
                        keep[i] = False
            yield arr, slot, keep, fs


def rescan_ops(engine, exclude_keys) -> _Moments:
    """Per-op moments again, without the events of the excluded batch keys."""
    m = _Moments()
    slots = len(engine.slot_codes)
    for arr, slot, keep, _ in op_chunks(engine, exclude_keys):
        if keep.any():
            m.add(slot[keep], arr["dur_ns"][keep], slots)
    m.grow(slots)
    return m


def op_mean_ci95(engine, exclude_keys=None) -> dict[int, list[float] | None]:
    """Per op slot: the 95% interval (ns) of the op's mean per call with the batches as the sampled units
    (ratio estimator, normal approximation), as :func:`lotus.analysis.stats.op_mean_ci95_ms` computes it
    in memory; one more scan, keeping six running sums per op (a batch split by a chunk boundary counts
    as two units). None for an op seen in fewer than two batches."""
    slots = len(engine.slot_codes)
    acc = np.zeros((slots, 6))  # units, sum t, sum c, sum t^2, sum t*c, sum c^2
    for arr, slot, keep, _fs in op_chunks(engine, exclude_keys):
        if not keep.any():
            continue
        sl = slot[keep].astype(np.int64)
        cols = (arr["batch_id"][keep].astype(np.int64), arr["epoch"][keep].astype(np.int64),
                arr["loader"][keep].astype(np.int64), sl)
        order = np.lexsort(cols)
        keys = np.stack([c[order] for c in cols])
        new = np.concatenate([[True], (np.diff(keys, axis=1) != 0).any(axis=0)])
        starts = np.flatnonzero(new)
        t = np.add.reduceat(arr["dur_ns"][keep][order].astype(np.float64), starts)
        c = np.diff(np.append(starts, len(order))).astype(np.float64)
        g = sl[order][starts]
        for j, v in enumerate((np.ones_like(t), t, c, t * t, t * c, c * c)):
            acc[:, j] += np.bincount(g, weights=v, minlength=slots)[:slots]
    out: dict[int, list[float] | None] = {}
    for k in range(slots):
        units, st, sc, stt, stc, scc = acc[k]
        if units < 2 or sc <= 0:
            out[k] = None
            continue
        mean = st / sc
        ss = max(stt - 2 * mean * stc + mean * mean * scc, 0.0)
        se = np.sqrt(ss / (units * (units - 1))) / (sc / units)
        out[k] = [max(float(mean - 1.96 * se), 0.0), float(mean + 1.96 * se)]  # a mean of times: >= 0
    return out


def window_scan(engine, t0: int, t1: int, *, name=None, path=None):
    """Every event (per-sample ones too) overlapping ``[t0, t1)`` wall-clock ns, read again in chunks:
    memory follows the window, not the run (:mod:`lotus.analysis.window`)."""
    from lotus.trace.events import Accumulator

    acc = Accumulator()
    spans: dict = {}
    for p in engine.paths:
        for arr, code, fs in record_chunks(p, engine.offsets, engine.loader_offsets.get(p, 0), acc.code,
                                     spans=spans):
            code, arg, _ = _legacy_fetch(arr, code)
            start = arr["start_ns"] + fs.shift
            dur = arr["dur_ns"]
            end = start + np.maximum(dur, 0)
            keep = (start < t1) & ((end > t0) | ((dur <= 0) & (start >= t0)))
            if not keep.any():
                continue
            lo = arr["loader"][keep].astype(np.int32) + fs.loader_offset
            acc.add(int(keep.sum()), code=code[keep], start_ns=start[keep], dur_ns=dur[keep],
                    batch_id=arr["batch_id"][keep], sample=arr["sample"][keep], arg=arg[keep], loader=lo,
                    epoch=arr["epoch"][keep], **{c: fs.consts[c] for c in ("pid", "role", "worker_id", "rank")})
    return _frame(acc, Run(name or "run", Path(path or ".")))


def export_events(engine, out: Path, meta: bytes) -> Path:
    """Every event of a scanned run to Parquet, chunk by chunk (the columns of ``load_events``; names,
    categories and roles as strings); ``meta`` goes to the schema metadata key ``lotus``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lotus.trace.events import EVENT_COLUMNS, Accumulator

    acc = Accumulator()
    ints = {"start_ns": pa.int64(), "dur_ns": pa.int64(), "pid": pa.int32(), "worker_id": pa.int32(),
            "rank": pa.int32(), "loader": pa.int32(), "epoch": pa.int32(), "batch_id": pa.int64(),
            "sample": pa.int64(), "arg": pa.int64()}
    schema = pa.schema([(c, ints.get(c, pa.string())) for c in EVENT_COLUMNS], metadata={b"lotus": meta})
    tmp = out.with_name(out.name + ".tmp")
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
            spans: dict = {}
            names = cats = pa.array([], pa.string())
            for p in engine.paths:
                for arr, code, fs in record_chunks(p, engine.offsets, engine.loader_offsets.get(p, 0), acc.code,
                                             spans=spans):
                    code, arg, _ = _legacy_fetch(arr, code)
                    if len(names) != len(acc.names):  # the name table as Arrow strings, taken by code
                        names = pa.array(acc.names, pa.string())
                        cats = pa.array(acc.cats, pa.string())
                    n = len(arr)
                    at = pa.array(code)
                    cols = {"name": names.take(at), "cat": cats.take(at), "start_ns": arr["start_ns"] + fs.shift,
                            "dur_ns": arr["dur_ns"], "pid": np.full(n, fs.consts["pid"], np.int32),
                            "role": pa.array([ROLES[fs.consts["role"]]], pa.string()).take(np.zeros(n, np.int8)),
                            "worker_id": np.full(n, fs.consts["worker_id"], np.int32),
                            "rank": np.full(n, fs.consts["rank"], np.int32),
                            "loader": arr["loader"].astype(np.int32) + fs.loader_offset, "epoch": arr["epoch"],
                            "batch_id": arr["batch_id"], "sample": arr["sample"], "arg": arg}
                    w.write_table(pa.table({c: _arrow(cols[c], schema.field(c).type) for c in EVENT_COLUMNS},
                                           schema=schema))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def _arrow(values, type_):
    """An Arrow array of ``type_`` (an Arrow array already: as it is)."""
    import pyarrow as pa

    return values if isinstance(values, pa.Array) else pa.array(values, type=type_)


def _frame(acc, run: Run):
    """The events DataFrame of the kept rows (the columns and categories of ``load_events``)."""
    import pandas as pd

    from lotus.trace.events import EVENT_COLUMNS, unique_labels

    code = acc.column("code")
    cat_names = sorted(set(acc.cats))
    cat_of_code = np.array([cat_names.index(c) for c in acc.cats], np.int8)
    columns = {"name": pd.Categorical.from_codes(code, categories=unique_labels(acc.names)),
               "cat": pd.Categorical.from_codes(cat_of_code[code], categories=cat_names)}
    for c in EVENT_COLUMNS[2:]:
        arr = acc.column(c)
        columns[c] = pd.Categorical.from_codes(arr, categories=ROLES) if c == "role" else arr
    df = pd.DataFrame(columns, copy=False)
    df.attrs["run"] = run.name
    df.attrs["path"] = str(run.path)
    df.attrs["files"] = FileList(acc.files)  # shared by the frames made from it
    return df
