"""``snapshot(state, now_ns)``: the numbers of the live view, a pure function of a :class:`LiveState`.

Every rate and share is over the window ``(now - window, now]``, shortened to start at the loader's
first event when the loader is younger than the window. Shares are fractions (0..1). See docs/top.md.
"""

from __future__ import annotations

import numpy as np

from lotus.live.state import SAMPLE_COUNT, SEC, LiveState
from lotus.trace import schema as S

SNAPSHOT_VERSION = 1
TOP_OPS = 5


def _end(a: np.ndarray) -> np.ndarray:
    return a["start"] + np.maximum(a["dur"], 0)


def _clip_sum(a: np.ndarray, lo: int, hi: int) -> int:
    """Total time of intervals ``a`` inside [lo, hi]."""
    if len(a) == 0:
        return 0
    return int(np.clip(np.minimum(_end(a), hi) - np.maximum(a["start"], lo), 0, None).sum())


def _key(a: np.ndarray) -> np.ndarray:
    return (a["epoch"].astype(np.int64) << 32) | (a["batch"] & 0xFFFFFFFF)


def _lookup(keys: np.ndarray, src_keys: np.ndarray, src_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``keys`` in (sorted, unique) ``src_keys``; second result: found mask."""
    if len(src_keys) == 0:
        return np.zeros(len(keys)), np.zeros(len(keys), bool)
    idx = np.minimum(np.searchsorted(src_keys, keys), len(src_keys) - 1)
    found = src_keys[idx] == keys
    return src_vals[idx], found


def batch_samples(consumed: np.ndarray, collate: np.ndarray, counts: np.ndarray, batch_size) -> np.ndarray:
    """Samples of each consumed batch: collate's count, else its `sample` events, else batch_size (NaN: unknown)."""
    keys = _key(consumed)
    n = np.full(len(keys), np.nan)
    if len(counts):
        uk, inv = np.unique(_key(counts), return_inverse=True)
        vals, found = _lookup(keys, uk, np.bincount(inv, weights=counts["arg"]))
        n[found] = vals[found]
    collate = collate[collate["arg"] > 0]
    if len(collate):
        uk, first = np.unique(_key(collate), return_index=True)
        vals, found = _lookup(keys, uk, collate["arg"][first].astype(float))
        n[found] = vals[found]
    if isinstance(batch_size, int) and batch_size > 0:
        n[np.isnan(n)] = batch_size
    return n


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def _detail_share(fetch: np.ndarray, lo: int, now: int) -> float:
    """Share of the fetch time ending in the window that detail batches took (1.0 without the flag)."""
    f = fetch[(fetch["kind"] == S.EV_FETCH) & (_end(fetch) > lo) & (_end(fetch) <= now)]
    flagged = (f["arg"] > 0) & ((f["arg"] & S.FETCH_DETAIL) != 0)
    total = float(f["dur"].sum())
    if not flagged.any() or total <= 0:
        return 1.0
    return max(float(f["dur"][flagged].sum()) / total, 1e-6)


def _ops(state: LiveState, rank: int, loader: int, lo: int, now: int, busy_ns: int, share: float = 1.0) -> list[dict]:
    """The window's ops by total time. ``share``: the share of the window's fetch time in detail batches (per-op
    records exist for those only: calls and totals are scaled to all batches, means are as measured)."""
    out = []
    first_sec, last_sec = lo // SEC, now // SEC
    for (r, ld, name), buckets in state.ops.items():
        if r != rank or ld != loader:
            continue
        total = calls = 0
        for sec, (t, n) in buckets.items():
            if first_sec <= sec <= last_sec:
                total += t
                calls += n
        if calls:
            out.append({"name": name, "total_ms": _r(total / share / 1e6, 3), "calls": round(calls / share),
                        "mean_ms": _r(total / calls / 1e6, 4),
                        "share_of_fetch": _r(total / share / busy_ns) if busy_ns > 0 else None})
    out.sort(key=lambda d: -d["total_ms"])
    return out[:TOP_OPS]


def _loader(state: LiveState, rows: np.ndarray, key: tuple[int, int], now: int, window: int) -> dict:
    rank, loader = key
    desc = state.loaders.get(key, {})
    lo = now - window
    first = state.first_ns.get(key, lo)
    start = min(now, max(lo, first))
    span = now - start
    kind = np.ascontiguousarray(rows["kind"])  # sorted (see snapshot): each kind is a slice

    def of(k: int) -> np.ndarray:
        return rows[np.searchsorted(kind, k, "left"): np.searchsorted(kind, k, "right")]

    consumed = of(S.EV_CONSUMED)
    recent = consumed[consumed["start"] > lo]
    n = batch_samples(recent, of(S.EV_COLLATE), of(SAMPLE_COUNT), desc.get("batch_size"))
    known = ~np.isnan(n)
    samples = None
    if len(n) == 0:
        samples = 0.0
    elif known.any():
        samples = float(n[known].sum()) * len(n) / int(known.sum())
    gpu = of(S.EV_GPU_WAIT)
    gpu = gpu[gpu["arg"] != 0]

    epoch = int(rows["epoch"].max()) if len(rows) else None
    ends = of(S.EV_EPOCH_END)
    done = epoch is not None and bool((ends["epoch"] == epoch).any())
    fetch = np.concatenate([of(S.EV_FETCH), of(S.EV_EXHAUSTED)])
    fetch_done = fetch[_end(fetch) <= now]

    def current(a: np.ndarray) -> np.ndarray:
        return a[a["epoch"] == epoch]

    dispatch = current(of(S.EV_DISPATCH))
    arrive = current(of(S.EV_ARRIVE))
    consumed_keys = _key(current(consumed))
    prepared = current(fetch_done)
    finished = np.concatenate([_key(prepared), _key(arrive), consumed_keys])
    outstanding = dispatch[~np.isin(_key(dispatch), finished)] if not done else dispatch[:0]
    ready_rows = np.concatenate([prepared[prepared["kind"] == S.EV_FETCH],
                                 arrive[(arrive["arg"] & S.ARRIVE_EXHAUSTED) == 0]])
    ready = np.setdiff1d(_key(ready_rows), consumed_keys) if not done else ready_rows[:0]

    nw = desc.get("num_workers")
    ids = set(range(nw)) if isinstance(nw, int) and nw > 0 else set()
    ids |= set(np.unique(fetch["worker"]).tolist()) | set(np.unique(of(S.EV_DISPATCH)["arg"]).tolist())
    if ids - {-1}:
        ids.discard(-1)
    workers = []
    busy_total = 0
    for w in sorted(ids):
        fw = fetch[fetch["worker"] == w]
        busy = _clip_sum(fw, start, now)
        busy_total += busy
        out_w = outstanding[outstanding["arg"] == w]
        if len(out_w) and span > 0:  # preparing a batch now: busy since its last fetch ended
            since = max(int(_end(fw).max()) if len(fw) else start, int(out_w["start"].min()), start)
            busy += max(0, now - since)
        fin = fw[(_end(fw) > lo) & (_end(fw) <= now) & (fw["kind"] == S.EV_FETCH)]
        workers.append({
            "worker": int(w),
            "busy_share": _r(min(1.0, busy / span)) if span > 0 else None,
            "in_flight": len(out_w),
            "batches_per_s": _r(len(fin) / (span / SEC), 3) if span > 0 else None,
            "mean_fetch_ms": _r(fin["dur"].mean() / 1e6, 3) if len(fin) else None,
        })
    ops = _ops(state, rank, loader, lo, now, busy_total, _detail_share(fetch_done, lo, now))
    per_s = span / SEC
    return {
        "rank": rank,
        "loader": loader,
        "name": desc.get("name") or desc.get("dataset") or f"loader {loader}",
        "dataset": desc.get("dataset"),
        "batch_size": desc.get("batch_size"),
        "num_workers": nw,
        "epoch": epoch,
        "epoch_done": done,
        "window_s": _r(per_s, 3),
        "samples_per_s": None if samples is None else (_r(samples / per_s, 2) if span > 0 else 0.0),
        "batches_per_s": _r(len(recent) / per_s, 3) if span > 0 else 0.0,
        "wait_share": _r(_clip_sum(of(S.EV_WAIT), start, now) / span) if span > 0 else None,
        "gpu_idle_share": _r(_clip_sum(gpu, start, now) / span) if len(gpu) and span > 0 else None,
        "queue_depth": len(ready),
        "in_flight": len(outstanding),
        "workers": workers,
        "slowest_op": ops[0] if ops else None,
        "ops": ops,
        "last_event_age_s": _r((now - int(_end(rows).max())) / SEC, 3) if len(rows) else None,
    }


def snapshot(state: LiveState, now_ns: int, window_s: float = 10.0) -> dict:
    """The live numbers at ``now_ns`` (the state's time base) over the last ``window_s`` seconds."""
    window = int(window_s * SEC)
    rows = state.rows
    if len(rows) and rows["start"].max() > now_ns:
        rows = rows[rows["start"] <= now_ns]
    rows = rows[np.argsort(rows["kind"], kind="stable")]  # one sort; then every kind is a slice
    keys = sorted(set(state.loaders) | set(state.first_ns))
    loaders = []
    for key in keys:
        mine = rows
        if len(keys) > 1:
            mine = rows[(rows["rank"] == key[0]) & (rows["loader"] == key[1])]
        loaders.append(_loader(state, mine, key, now_ns, window))
    files = list(state.files.values())
    return {
        "version": SNAPSHOT_VERSION,
        "now_ns": int(now_ns),
        "window_s": window_s,
        "samples_per_s": _r(sum(d["samples_per_s"] or 0.0 for d in loaders), 2),
        "files": {"total": len(files), "open": sum(not f.ended for f in files),
                  "main": sum(f.role == "main" for f in files), "worker": sum(f.role == "worker" for f in files),
                  "events_read": sum(f.records for f in files)},
        "loaders": loaders,
    }
