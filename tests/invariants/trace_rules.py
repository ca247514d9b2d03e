"""The output invariants that need the trace (rates against its batches, the trends' windows) or read
files written for other tools (Perfetto JSON, the figures' data). The rest: :mod:`tests.invariants.rules`."""

from __future__ import annotations

import math

import numpy as np

from tests.invariants.rules import Violation, _is_num


def handoffs(batches):
    """{(rank, loader): (sorted hand-off ns, samples)} of the successful, consumed batches."""
    from lotus.query.batches import ok_batches

    b = ok_batches(batches)
    b = b[b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)]
    out = {}
    for (rank, loader), g in b.groupby(["rank", "loader"], sort=True):
        t = g["consumed_ns"].to_numpy(np.int64)
        n = g["n_samples"].to_numpy(dtype=np.float64, na_value=np.nan)
        o = np.argsort(t, kind="stable")
        out[(int(rank), int(loader))] = (t[o], n[o])
    return out


def rate_ceiling(batches) -> float:
    """The most samples/s the trace's hand-offs could deliver over any window holding two or more of them:
    per (rank, loader) the densest pair of consecutive hand-offs, both batches counted ((n_i + n_i+1) / gap:
    an average over k >= 2 hand-offs of one loop is never above it, by the mediant inequality), summed.
    Infinite when two hand-offs of one loop share a nanosecond or batch sizes are unknown."""
    total = 0.0
    for t, n in handoffs(batches).values():
        if len(t) < 2:
            continue
        gap = np.diff(t).astype(np.float64)
        pair = n[:-1] + n[1:]
        if (gap <= 0).any() or not np.isfinite(pair).all():
            return math.inf
        total += float((pair / gap).max()) * 1e9
    return total


def check_rate(rate, ceiling: float, where: str, path: str) -> list[Violation]:
    if rate is None or rate <= ceiling * (1 + 1e-9):
        return []
    return [Violation(where, path, rate, f"above what the trace's batches could deliver ({ceiling:.6g} samples/s)")]


def check_trends(t: dict, batches, where: str) -> list[Violation]:
    """Trends of one run: every rate under the ceiling; a bucket's rate only from a bucket holding at least
    :data:`lotus.analysis.windowrate.MIN_HANDOFFS` hand-offs of each rank that handed any out in it and covered by
    the run for at least :data:`~lotus.analysis.windowrate.MIN_COVER` of its width; batch counts as recounted."""
    from lotus.analysis.windowrate import MIN_COVER, MIN_HANDOFFS

    out = []
    cap = rate_ceiling(batches)
    for i, r in enumerate(t.get("per_epoch") or []):
        out += check_rate(r["samples_per_s"], cap, where, f"trends/per_epoch/{i}/samples_per_s")
    rows = t.get("per_bucket") or []
    if not rows:
        return out
    hand = handoffs(batches)
    main = max(sorted({lo for _r, lo in hand}), key=lambda lo: sum(len(v[0]) for (r, ld), v in hand.items()
                                                                   if ld == lo))
    mine = {r: v[0] for (r, ld), v in hand.items() if ld == main}
    t0 = min(int(v[0]) for v in mine.values())
    t1 = max(int(v[-1]) for v in mine.values())
    width = max(int(t["bucket_s"] * 1e9), 1)
    for i, r in enumerate(rows):
        p = f"trends/per_bucket/{i}"
        lo = t0 + i * width
        last = i == len(rows) - 1
        counts = {rk: int(((tt >= lo) & ((tt < lo + width) | last)).sum()) for rk, tt in mine.items()}
        if r["batches"] != sum(counts.values()):
            out.append(Violation(where, p + "/batches", r["batches"], f"the bucket holds {sum(counts.values())}"))
        if r["samples_per_s"] is None:
            continue
        out += check_rate(r["samples_per_s"], cap, where, p + "/samples_per_s")
        few = {rk: c for rk, c in counts.items() if 0 < c < MIN_HANDOFFS}
        if few:
            out.append(Violation(where, p + "/samples_per_s", r["samples_per_s"],
                                 f"a rate from a bucket with fewer than {MIN_HANDOFFS} hand-offs of a rank ({few})"))
        cover = (min(lo + width, t1) - lo) / width
        if cover < MIN_COVER:
            out.append(Violation(where, p + "/samples_per_s", r["samples_per_s"],
                                 f"a rate from a bucket the run covers {cover:.1%} of"))
    return out


# -- files written for other tools -----------------------------------------------------------------------
def check_chrome(doc: dict, where: str) -> list[Violation]:
    """A Chrome/Perfetto trace: every event's time finite and >= 0 from the file's base, durations >= 0,
    counter values finite and >= 0."""
    out = []
    for i, ev in enumerate(doc.get("traceEvents") or []):
        for k in ("ts", "dur"):
            v = ev.get(k)
            if v is not None and (not math.isfinite(v) or v < 0):
                out.append(Violation(where, f"traceEvents/{i}/{k}", v, f"{ev.get('name')!r}: not a time >= 0"))
        if ev.get("ph") == "C":
            for k, v in (ev.get("args") or {}).items():
                if _is_num(v) and (not math.isfinite(v) or v < 0):
                    out.append(Violation(where, f"traceEvents/{i}/args/{k}", v, "a counter < 0 or not finite"))
    return out


def check_frame(df, where: str) -> list[Violation]:
    """A figure's data: no infinity, every known number >= 0 (times, ids, positions)."""
    out = []
    for col in df.columns:
        if df[col].dtype.kind not in "iuf":
            continue
        v = df[col].to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.isinf(v) | (v < 0)
        if bad.any():
            out.append(Violation(where, col, v[bad][:5].tolist(), "infinite or negative"))
    return out
