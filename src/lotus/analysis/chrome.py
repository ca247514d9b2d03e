"""Chrome Trace Event JSON of a run, for Perfetto (ui.perfetto.dev) and chrome://tracing.

Layout: one process per (rank, pid) named ``rank R main (pid P)`` / ``rank R worker K (pid P)``;
threads ``main thread``, ``pin thread``, ``GPU (CUDA events)``, ``preprocessing (in main process)``
(num_workers=0) and ``worker K``. Events with a duration are ``"ph":"X"`` slices, instants
(``consumed``, ``arrive``, epoch and worker markers) ``"ph":"i"``, GPU telemetry (``gpu_util``...)
counter tracks ``"ph":"C"``, and a flow arrow (``"ph":"s"`` -> ``"ph":"f"``, ``"bp":"e"``) links each
batch's preprocessing to its consumption. ``coarse=True`` leaves out per-sample and per-op slices. A
fetch's ``runq`` record (trace format 4: its thread's run-queue delay and CPU time, sums over the fetch, not
an interval) is not drawn: the batches carry it (``runq_ns``, ``prep_cpu_ns``).

Fetches that made no batch are marked, never drawn as batches: an ``exhausted`` fetch (IterableDataset
end) is an instant marker on its worker's track at the fetch's start (``args.took_ns``: the time the
worker spent finding out), the main process's ``arrive`` of that message is named
``arrive (exhausted)``, and a fetch that raised is the slice ``fetch (failed)``.

Time base, as in torch.profiler (Kineto) traces: ``ts`` (µs, 3 decimals = exact ns) is
``(wall-clock ns - baseTimeNanoseconds) / 1000``, with ``baseTimeNanoseconds`` written at the top
level; lotus picks the whole second before the first event, its own or a merged Kineto trace's (a
profiler started before the loader has the earlier events; no ``ts`` is negative), so that ``ts`` stays
small enough for double-precision JSON parsers to keep every nanosecond. Checked against
``torch.profiler.profile(...).export_chrome_trace`` (torch 2.14): Kineto writes the same key and its
``ts * 1000 + baseTimeNanoseconds`` is ``time.time_ns()`` of the profiled process, i.e. the wall
clock lotus events are on (its own base is ~7 weeks before, which would leave ~1 ns of double
rounding). When merging, Kineto's events are moved to lotus's base: ``ts += (its base - lotus
base) / 1000``, rounded to the ns (older traces without the key have ``ts`` in µs since the epoch:
base 0). Lotus processes whose pid collides with a Kineto pid are renumbered (their names keep the
real pid); the rest of Kineto's top-level keys is kept.

The JSON is streamed: events are formatted in vectorised chunks (pyarrow string kernels) and
written as they are made; memory stays bounded by the chunk, not the trace.
"""

from __future__ import annotations

import collections
import gzip
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lotus.analysis.arrowtext import num as _num
from lotus.analysis.arrowtext import open_out as _open
from lotus.analysis.arrowtext import us as _us
from lotus.analysis.arrowtext import write_strings as _write_strings

_log = logging.getLogger("lotus.analysis")

COUNTER_UNITS = {"gpu_util": "%", "gpu_power": "mW", "gpu_energy": "mJ", "gpu_sm_clock": "MHz",
                 "gpu_mem_clock": "MHz"}
INSTANTS = {"consumed", "arrive", "epoch_start", "epoch_end", "worker_start", "worker_end", "main_cpu",
            "batch_bytes"}
NOT_SLICES = {"runq"}  # a sum over its fetch (run-queue delay), not an interval: in the batches, not drawn
ARG_KEYS = {"main_cpu": "process_cpu_ns", "batch_bytes": "bytes", "dispatch": "worker", "wait": "flags",
            "fetch": "flags", "collate": "samples",
            "epoch_start": "num_workers", "worker_start": "worker", "worker_end": "worker",
            "exhausted": "took_ns", "fetch (failed)": "flags", "arrive (exhausted)": "flags"}
FAILED_FETCH, EXHAUSTED_ARRIVE = "fetch (failed)", "arrive (exhausted)"
TID_MAIN, TID_PIN, TID_GPU, TID_PREP = 1, 2, 3, 4
THREAD_NAMES = {TID_MAIN: "main thread", TID_PIN: "pin thread", TID_GPU: "GPU (CUDA events)",
                TID_PREP: "preprocessing (in main process)"}
CHUNK_ROWS = 1 << 17


@dataclass
class ChromeTraceSummary:
    path: Path
    base_ns: int
    slices: int = 0
    instants: int = 0
    exhausted: int = 0  # exhausted-fetch markers
    failed: int = 0  # failed-fetch slices
    flows: int = 0
    counters: int = 0
    processes: int = 0
    kineto_events: int = 0
    merged: list[str] = field(default_factory=list)


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


class _Processes:
    """(rank, pid) -> Chrome pid, names and sort order."""

    def __init__(self, events, taken: set):
        rank = events["rank"].to_numpy().astype(np.int64)
        pid = events["pid"].to_numpy().astype(np.int64)
        key = (rank << 32) | (pid & 0xFFFFFFFF)
        self.keys, first, self.inverse = np.unique(key, return_index=True, return_inverse=True)
        role = np.asarray(events["role"].array.take(first))
        wid = events["worker_id"].to_numpy()[first]
        start = events["start_ns"].to_numpy()[first]
        self.rank = (self.keys >> 32).astype(np.int64)
        self.pid = (self.keys & 0xFFFFFFFF).astype(np.int64)
        self.is_main = role == "main"
        self.worker = wid.astype(np.int64)
        used = set(taken)
        chrome = []
        spare = max([*[p for p in taken if isinstance(p, int)], *self.pid.tolist(), 0]) + 1
        for p in self.pid.tolist():
            if p in used:
                p, spare = spare, spare + 1
            used.add(p)
            chrome.append(p)
        self.chrome = np.array(chrome, np.int64)
        order = np.lexsort((start, self.worker, ~self.is_main, self.rank))
        self.sort_index = np.empty(len(order), np.int64)
        self.sort_index[order] = np.arange(len(order))

    def name(self, i: int) -> str:
        who = "main" if self.is_main[i] else f"worker {self.worker[i]}"
        return f"rank {self.rank[i]} {who} (pid {self.pid[i]})"

    def index(self, rank: np.ndarray, pid: np.ndarray) -> np.ndarray:
        """Process index of (rank, pid) pairs (-1 where unknown)."""
        key = (rank.astype(np.int64) << 32) | (pid.astype(np.int64) & 0xFFFFFFFF)
        if len(self.keys) == 0:
            return np.full(len(key), -1, np.int64)
        pos = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        return np.where(self.keys[pos] == key, pos, -1)


def _tids(events, procs: _Processes, names: list[str]) -> np.ndarray:
    codes = np.asarray(events["name"].array.codes)
    cats = events["cat"].array
    cat_codes = np.asarray(cats.codes)
    cat_labels = list(cats.categories)
    main_proc = procs.is_main[procs.inverse]
    tid = np.full(len(events), TID_MAIN, np.int64)
    code_of = {n: i for i, n in enumerate(names)}
    gpu_codes = [code_of[n] for n in ("gpu_wait", "gpu_step") if n in code_of]
    if "pin" in cat_labels:
        tid[cat_codes == cat_labels.index("pin")] = TID_PIN
    if gpu_codes:
        tid[np.isin(codes, gpu_codes)] = TID_GPU
    prep = [cat_labels.index(c) for c in ("batch", "sample", "op") if c in cat_labels]
    if prep:
        tid[main_proc & np.isin(cat_codes, prep)] = TID_PREP
    tid[~main_proc] = 1  # the worker's own (only) thread
    return tid


def _kineto_first_ns(doc: dict) -> int | None:
    """The wall-clock ns of a Kineto trace's earliest event (``ts`` µs after its ``baseTimeNanoseconds``)."""
    ts = [e["ts"] for e in doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    return int(min(ts) * 1000) + int(doc.get("baseTimeNanoseconds", 0) or 0) if ts else None


def write_chrome_trace(events, out: str | os.PathLike, *, coarse: bool = False, batches=None,
                       kineto: list[str | os.PathLike] | tuple = (), chunk_rows: int = CHUNK_ROWS,
                       run_name: str | None = None) -> ChromeTraceSummary:
    """Write ``events`` (one run) as Chrome Trace Event JSON to ``out`` (``.gz``: gzip); see the module doc."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lotus import __version__

    out = Path(out)
    kineto_docs = [read_kineto(Path(p)) for p in kineto]
    taken: set = set()
    for doc in kineto_docs:
        taken |= {e.get("pid") for e in doc["traceEvents"] if isinstance(e, dict)}
    starts = events["start_ns"].to_numpy()
    first = [int(starts.min())] if len(starts) else []
    first += [w for w in map(_kineto_first_ns, kineto_docs) if w is not None]
    base = min(first) // 1_000_000_000 * 1_000_000_000 if first else 0
    summary = ChromeTraceSummary(path=out, base_ns=base, merged=[str(p) for p in kineto])
    procs = _Processes(events, taken)
    summary.processes = len(procs.keys)
    if not len(events):
        from lotus.errors import InputError

        raise InputError("no events to write", events.attrs.get("path"))

    cat_arr = events["name"].array
    names = [str(c) for c in cat_arr.categories]
    codes = np.asarray(cat_arr.codes)
    tids = _tids(events, procs, names)
    chrome_pid = procs.chrome[procs.inverse]
    dur = events["dur_ns"].to_numpy()
    code_of = {n: i for i, n in enumerate(names)}

    is_counter = np.isin(codes, [code_of[n] for n in COUNTER_UNITS if n in code_of])
    is_instant = np.isin(codes, [code_of[n] for n in INSTANTS if n in code_of]) & (dur == 0)
    arg = events["arg"].to_numpy()
    flag1 = (arg > 0) & ((arg & 1) != 0)
    exhausted = codes == code_of.get("exhausted", -2)
    failed = (codes == code_of.get("fetch", -2)) & flag1
    label = codes
    if failed.any() or exhausted.any():  # shown under their own names, exhausted as markers
        label = codes.astype(np.int32)
        label[failed] = len(names)
        label[(codes == code_of.get("arrive", -2)) & flag1] = len(names) + 1
        is_instant = is_instant | exhausted
        arg = np.where(exhausted, dur, arg)
    summary.exhausted, summary.failed = int(exhausted.sum()), int(failed.sum())
    labels = [*names, FAILED_FETCH, EXHAUSTED_ARRIVE]
    keep = ~is_counter & ~np.isin(codes, [code_of[n] for n in NOT_SLICES if n in code_of])
    if coarse:
        cats = events["cat"].array
        drop = [i for i, c in enumerate(cats.categories) if c in ("sample", "op")]
        keep &= ~np.isin(np.asarray(cats.codes), drop)
    rows = np.flatnonzero(keep)
    # per track: by start, longer first, so that parents precede their children
    rows = rows[np.lexsort((-dur[rows], starts[rows], tids[rows], chrome_pid[rows]))]

    name_json = pa.array([_json_str(n) for n in labels])
    event_cat = events["cat"].array
    cat_json = pa.array([_json_str(str(c)) for c in event_cat.categories])
    cat_codes = np.asarray(event_cat.codes)
    arg_key = pa.array([f',"{ARG_KEYS[n]}":' if n in ARG_KEYS else "" for n in labels])
    loaders = events["loader"].to_numpy()
    show_loader = bool(len(loaders)) and bool((loaders != loaders[0]).any() or loaders[0] != 0)
    cols = {c: events[c].to_numpy() for c in ("epoch", "batch_id", "sample")}
    cols["arg"] = arg

    with _open(out) as f:
        top = {"displayTimeUnit": "ms", "baseTimeNanoseconds": base}
        other = {"lotus_version": __version__, "run": run_name or events.attrs.get("run"),
                 "time_base": "ts = (wall-clock ns - baseTimeNanoseconds) / 1000", "coarse": coarse}
        if kineto_docs:
            top = {k: v for k, v in kineto_docs[0].items() if k != "traceEvents"}
            top["baseTimeNanoseconds"] = base
            other["merged_kineto_traces"] = summary.merged
            other = {**(top.get("otherData") or {}), "lotus": other}
        else:
            other = {"lotus": other}
        top["otherData"] = other
        head = json.dumps(top, separators=(",", ":"))[:-1]
        f.write(f'{head},"traceEvents":[\n'.encode())
        f.write(_metadata(procs, tids, procs.inverse).encode())
        for doc in kineto_docs:
            shift_us = (int(doc.get("baseTimeNanoseconds", 0) or 0) - base) / 1000
            evs = doc["traceEvents"]
            for i in range(0, len(evs), 10000):
                part = evs[i: i + 10000]
                if shift_us:
                    for e in part:
                        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
                            e["ts"] = round(e["ts"] + shift_us, 3)
                if part:
                    f.write((",\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in part)).encode())
            summary.kineto_events += len(evs)

        def chunk(lo: int):
            r = rows[lo: lo + chunk_rows]
            inst = is_instant[r]
            c = label[r]
            args = [',"args":{"epoch":', _num(cols["epoch"][r])]
            b, s, a = cols["batch_id"][r], cols["sample"][r], cols["arg"][r]
            args += [pc.if_else(pa.array(b >= 0), pc.binary_join_element_wise(',"batch":', _num(b), ""), "")]
            args += [pc.if_else(pa.array(s >= 0), pc.binary_join_element_wise(',"sample":', _num(s), ""), "")]
            key = arg_key.take(pa.array(c))
            args += [pc.if_else(pc.not_equal(key, ""), pc.binary_join_element_wise(key, _num(a), ""), "")]
            if show_loader:
                args += [',"loader":', _num(loaders[r])]
            ph = pc.if_else(pa.array(inst), ',\n{"ph":"i","s":"t","name":', ',\n{"ph":"X","name":')
            dur_piece = pc.if_else(pa.array(inst), "", pc.binary_join_element_wise(',"dur":', _us(dur[r]), ""))
            line = pc.binary_join_element_wise(
                ph, name_json.take(pa.array(c)), ',"cat":', cat_json.take(pa.array(cat_codes[r])),
                ',"pid":', _num(chrome_pid[r]), ',"tid":', _num(tids[r]), ',"ts":', _us(starts[r] - base),
                dur_piece, *args, "}}", "")
            return line, int(inst.sum()), len(r)

        # Chunks are formatted on two threads (the string kernels release the GIL) and written in
        # order; at most two are in flight, so memory stays bounded by the chunk size.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            pending = collections.deque()
            for lo in range(0, len(rows), chunk_rows):
                pending.append(pool.submit(chunk, lo))
                if len(pending) >= 2:
                    _flush_chunk(f, pending.popleft().result(), summary)
            while pending:
                _flush_chunk(f, pending.popleft().result(), summary)

        summary.counters = _write_counters(f, events, is_counter, codes, names, chrome_pid, base)
        summary.flows = _write_flows(f, events, batches, procs, base)
        f.write(b"\n]}\n")
    return summary


def _flush_chunk(f, done, summary: ChromeTraceSummary) -> None:
    line, instants, n = done
    _write_strings(f, line)
    summary.instants += instants
    summary.slices += n - instants


def _metadata(procs: _Processes, tids: np.ndarray, proc_of_row: np.ndarray) -> str:
    lines = []
    pairs = np.unique((proc_of_row.astype(np.int64) << 8) | tids)
    threads: dict[int, list[int]] = {}
    for v in pairs.tolist():
        threads.setdefault(v >> 8, []).append(v & 0xFF)
    for i in range(len(procs.keys)):
        pid = int(procs.chrome[i])
        lines.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": procs.name(i)}})
        lines.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                      "args": {"sort_index": int(procs.sort_index[i])}})
        for tid in threads.get(i, [TID_MAIN]):
            tname = THREAD_NAMES[tid] if procs.is_main[i] else f"worker {procs.worker[i]}"
            lines.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}})
            lines.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                          "args": {"sort_index": tid}})
    return ",\n".join(json.dumps(x, separators=(",", ":")) for x in lines)


def _write_counters(f, events, is_counter, codes, names, chrome_pid, base) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = np.flatnonzero(is_counter)
    if rows.size == 0:
        return 0
    rows = rows[np.argsort(events["start_ns"].to_numpy()[rows], kind="stable")]
    label = pa.array([f'"{n}","args":{{"{COUNTER_UNITS.get(n, "value")}":' for n in names])
    line = pc.binary_join_element_wise(
        ',\n{"ph":"C","name":', label.take(pa.array(codes[rows])), _num(events["arg"].to_numpy()[rows]),
        '},"pid":', _num(chrome_pid[rows]), ',"ts":', _us(events["start_ns"].to_numpy()[rows] - base), "}", "")
    _write_strings(f, line)
    return int(rows.size)


def _write_flows(f, events, batches, procs: _Processes, base: int) -> int:
    import pyarrow.compute as pc

    if batches is None:
        from lotus.query import batches_from_events

        batches = batches_from_events(events)
    need = ["prep_start_ns", "prep_dur_ns", "consumed_ns", "worker_pid"]
    ok = np.ones(len(batches), bool)
    for c in need:
        ok &= batches[c].notna().to_numpy(dtype=bool, na_value=False)
    b = batches[ok]
    if b.empty:
        return 0
    rank = b["rank"].to_numpy(np.int64)
    src = procs.index(rank, b["worker_pid"].to_numpy(np.int64))
    # destination: the rank's main process (the first one in sort order)
    mains: dict[int, int] = {}
    for i in np.flatnonzero(procs.is_main).tolist():
        r = int(procs.rank[i])
        if r not in mains or procs.sort_index[i] < procs.sort_index[mains[r]]:
            mains[r] = i
    dst = np.array([mains.get(r, -1) for r in rank.tolist()], np.int64)
    good = (src >= 0) & (dst >= 0)
    if not good.any():
        return 0
    src, dst = src[good], dst[good]
    src_pid, dst_pid = procs.chrome[src], procs.chrome[dst]
    src_tid = np.where(procs.is_main[src], TID_PREP, 1)
    prep_start = b["prep_start_ns"].to_numpy(np.int64)[good]
    prep_dur = b["prep_dur_ns"].to_numpy(np.int64)[good]
    src_ts = prep_start + np.maximum(prep_dur - 1, 0)  # inside the fetch slice
    dst_ts = b["consumed_ns"].to_numpy(np.int64)[good]
    ids = _num(np.arange(1, int(good.sum()) + 1))
    start = pc.binary_join_element_wise(',\n{"ph":"s","name":"batch","cat":"flow","id":', ids, ',"pid":',
                                        _num(src_pid), ',"tid":', _num(src_tid), ',"ts":',
                                        _us(src_ts - base), "}", "")
    finish = pc.binary_join_element_wise(',\n{"ph":"f","bp":"e","name":"batch","cat":"flow","id":', ids,
                                         ',"pid":', _num(dst_pid), f',"tid":{TID_MAIN},"ts":',
                                         _us(dst_ts - base), "}", "")
    _write_strings(f, start)
    _write_strings(f, finish)
    return int(good.sum())


def read_kineto(path: Path) -> dict:
    """A torch.profiler (Kineto) Chrome-JSON trace, plain or gzipped; InputError when unreadable."""
    from lotus.errors import InputError

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise InputError("no such file", path) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable torch.profiler (Chrome JSON) trace: {exc}", path) from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError("not a Chrome trace (no 'traceEvents' list)", path)
    if "baseTimeNanoseconds" not in doc:
        _log.info("%s: no baseTimeNanoseconds; reading its ts as µs since the epoch", path)
    return doc
