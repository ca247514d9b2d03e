"""The sensitivity matrix (CPUs x page cache) from a model and the probes measured so far (pure functions).

Every point is for the worker count the model finds best for its CPUs (``model_num_workers``). A point
that was probed shows the measurement, always, with the probe's worker count and its 95% interval; the
model's worker count and prediction stay beside it. When the probe ran another worker count and the
model predicts above the probe's interval, the point is ``unsettled``: worth a probe at the model's count.
A predicted point is kept monotone between the measured points around it, using their intervals (never
pulled below a measured neighbour's interval by a noisy low point, nor above one by a noisy high point);
measured points are never moved, and only measured points whose intervals are apart count as non-monotone.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from lotus.errors import InputError

GB = 1e9
FILES_UNKNOWN = "as found (dataset files unknown)"


@dataclass
class Point:
    cpus: int
    cache_gb: float
    samples_per_s: float | None
    measured: bool
    predicted_samples_per_s: float | None = None  # the model's, at model_num_workers
    bottleneck: str | None = None
    probe: str | None = None
    num_workers: int | None = None  # the worker count of samples_per_s: the probe's when measured, else the model's
    ci95: list[float] | None = None  # measured points: the probe's 95% interval
    cache_state: str | None = None  # measured points: the page cache as the probe ran (as-is, warm, cold, N GB)
    model_num_workers: int | None = None  # the worker count the model finds best for these CPUs
    stopped_by: str | None = None  # measured points: why the probe ended (precision, steps, time; None: job ended)
    note: str | None = None  # measured points: the rate's note (a wide interval, a short window...)
    unsettled: bool = False  # measured at another worker count than the model's, which predicts above the interval
    how: str = "predicted"  # "measured", "predicted" (the model, checked by every probe), "interpolated", "unknown"
    pi95: list[float] | None = None  # predicted/interpolated points: the range the value is known to lie in


def cache_grid(dataset_gb: float) -> list[float]:
    """Page-cache sizes (GB) to profile: 0, 25, 50, 75 and 100% of the dataset, to the MB, each once (a dataset
    of a few MB would repeat sizes: each repeated cell of the matrix was measured and printed again)."""
    return sorted({round(dataset_gb * f, 3) for f in (0, 0.25, 0.5, 0.75, 1.0)})


def room_grid(grid: list[float], given: bool, dataset_gb: float, room_bytes: int | None, bound: str | None,
              notes: list[str]) -> list[float]:
    """The cache axis on a machine whose page cache holds ``room_bytes`` (:func:`lotus.profile.pagecache.
    cache_room`, bounded by ``bound``): the default axis stops there when that is less than the dataset; a
    ``given`` one is kept, with a note for its sizes above it. Notes go to ``notes``."""
    if room_bytes is None or room_bytes >= dataset_gb * 1e9:
        return grid
    where = "the free memory" if bound == "memory" else f"the memory limit of {bound}"
    what = (f"this machine's page cache can hold {room_bytes / 1e9:.3g} GB ({where}), less than the dataset "
            f"({dataset_gb:.3g} GB)")
    if not given:
        notes.append(f"{what}: the cache axis stops there (--cache-gb for sizes a bigger machine has, predicted "
                     "only)")
        return cache_grid(room_bytes / 1e9)
    if max(grid) > room_bytes / 1e9:
        notes.append(f"{what}: cells above it are what a machine with more memory would give; a probe there is "
                     "partly cold")
    return grid


def cpu_grid(allowed: list[int]) -> list[int]:
    """1, 2, 4, 8... up to the number of CPUs this process may use (and that number)."""
    n = len(allowed)
    out, v = [], 1
    while v < n:
        out.append(v)
        v *= 2
    return [*out, n]


def check_grids(cpus_grid: list[int] | None, cache_grid_gb: list[float] | None, n_cpus: int) -> list[int]:
    """The CPU grid within 1..``n_cpus`` (default :func:`cpu_grid`); InputError naming the problem when
    nothing is left of ``cpus_grid`` or a cache size is not a number >= 0."""
    if cache_grid_gb is not None:
        bad = [g for g in cache_grid_gb if not (math.isfinite(g) and g >= 0)]
        if bad:
            raise InputError(f"--cache-gb must be sizes >= 0 GB, got {', '.join(f'{g:g}' for g in bad)}")
    if cpus_grid is None:
        return cpu_grid(list(range(n_cpus)))
    grid = sorted({c for c in cpus_grid if 1 <= c <= n_cpus})
    if not grid:
        got = ",".join(str(c) for c in cpus_grid) or "(empty)"
        raise InputError(f"--cpus-grid {got}: no CPU count between 1 and the {n_cpus} CPU(s) this process may use")
    return grid


def default_workers(cpus: int) -> int:
    """Before any model: a worker per CPU, none on one CPU. Not CPUs - 1: the main process of a job whose
    input is the question mostly waits for batches, and a CPU left to it is a CPU of decoding lost. Measured
    (benchmarks/corpus.py, plain jobs alone, on 2 CPUs): 2 workers against 1 gave 461 vs 241 samples/s (VM,
    CPU-bound), 21,658 vs 13,606 (tokenizer-like), 710 vs 432 (short epochs), no less where the step bounds the
    job (step-bound: 385 vs 383); GPU host, ResNet-18 JPEG: 472 with 2 workers, lotus's 1-worker probe 278."""
    return cpus if cpus > 1 else 0


def best_workers(model, cpus: int, cache_hit_rate=None, near_best: float = 0.02, exclude=()):
    """(workers, prediction): the fewest workers whose predicted samples/s on ``cpus`` CPUs is within
    ``near_best`` of the best over 0 .. 2 x cpus (more workers than that only share the same CPUs);
    ``exclude``: worker counts whose probe failed on these CPUs."""
    preds = {}
    for w in range(0, 2 * cpus + 1):
        if w in exclude:
            continue
        p = model.predict(w, float(cpus), cache_hit_rate=cache_hit_rate)
        if p.samples_per_s:
            preds[w] = p
    if not preds:
        return default_workers(cpus), model.predict(default_workers(cpus), float(cpus), cache_hit_rate=cache_hit_rate)
    top = max(p.samples_per_s for p in preds.values())
    w = min(w for w, p in preds.items() if p.samples_per_s >= (1 - near_best) * top)
    return w, preds[w]


def hit_rate(gb: float | None, hits, dataset_bytes) -> float | None:
    """The page-cache hit rate the model is asked for at ``gb`` GB (None: the cache as traced)."""
    from lotus.model.tables import hit_rate_at

    if gb is None:
        return None
    if hits is not None and dataset_bytes:
        return hit_rate_at(hits, gb, dataset_bytes)
    return min(gb * GB / dataset_bytes, 1.0) if dataset_bytes else None


def predict(model, grid, cache_gb, hits, dataset_bytes, exclude: dict[int, set[int]] | None = None) -> list[Point]:
    """Every point predicted at the model's best worker count for its CPUs (``exclude``: failed counts)."""
    points = []
    for gb in cache_gb or [None]:
        h = hit_rate(gb, hits, dataset_bytes)
        for c in grid:
            w, p = best_workers(model, c, cache_hit_rate=h, exclude=(exclude or {}).get(c, ()))
            points.append(Point(cpus=c, cache_gb=gb if gb is not None else 0.0, samples_per_s=p.samples_per_s,
                                measured=False, predicted_samples_per_s=p.samples_per_s, bottleneck=p.bottleneck,
                                num_workers=w, model_num_workers=w))
    return points


def _lo(rate: float, ci) -> float:
    return ci[0] if ci else rate


def _hi(rate: float, ci) -> float:
    return ci[1] if ci else rate


def apply_measured(matrix: list[Point], measured: dict) -> None:
    """Measured rates replace predictions at every probed point (``measured``: {(cpus, cache_gb): [probe
    dicts]}): the probe at the model's worker count if there is one, else the fastest. The model's worker
    count and prediction stay in ``model_num_workers`` / ``predicted_samples_per_s``."""
    for p in matrix:
        ms = [m for m in measured.get((p.cpus, p.cache_gb), ()) if m.get("samples_per_s") is not None]
        if not ms:
            continue
        at_model = [m for m in ms if m.get("num_workers") == p.model_num_workers]
        m = max(at_model or ms, key=lambda q: q["samples_per_s"])
        p.measured, p.samples_per_s, p.probe, p.how = True, m["samples_per_s"], m["name"], "measured"
        p.ci95, p.cache_state = m.get("ci95"), m.get("cache_state") or str(m.get("cache"))
        p.stopped_by, p.note = m.get("stopped_by"), m.get("note")
        if m.get("num_workers") is not None:
            p.num_workers = m["num_workers"]
        if not at_model and p.predicted_samples_per_s is not None:
            hi = m["ci95"][1] if m.get("ci95") else m["samples_per_s"] * 1.02
            p.unsettled = p.predicted_samples_per_s > hi


def monotone(matrix: list[Point]) -> list[str]:
    """Clamp each predicted point between the measured points it must not beat or fall below (fewer or equal
    CPUs and cache: at least their interval's low end; more or equal: at most their interval's high end; the
    low bound wins a conflict). Returns a note per pair of measured points out of order with intervals apart."""
    meas = [p for p in matrix if p.measured and p.samples_per_s]
    for p in matrix:
        if p.measured or not p.samples_per_s:
            continue
        v = p.samples_per_s
        hi = [_hi(m.samples_per_s, m.ci95) for m in meas if m.cpus >= p.cpus and m.cache_gb >= p.cache_gb]
        lo = [_lo(m.samples_per_s, m.ci95) for m in meas if m.cpus <= p.cpus and m.cache_gb <= p.cache_gb]
        if hi:
            v = min(v, *hi)
        if lo:
            v = max(v, *lo)
        p.samples_per_s = v
    notes = []
    for a in meas:
        for b in meas:
            more = b.cpus >= a.cpus and b.cache_gb >= a.cache_gb and (b.cpus, b.cache_gb) != (a.cpus, a.cache_gb)
            if more and _lo(a.samples_per_s, a.ci95) > _hi(b.samples_per_s, b.ci95):
                notes.append(f"measured points out of order: {a.cpus} CPUs, {a.cache_gb:g} GB ({a.samples_per_s:,.1f}) "
                             f"above {b.cpus} CPUs, {b.cache_gb:g} GB ({b.samples_per_s:,.1f}) with intervals apart")
    return notes


def with_interval(matrix: list[Point], rel: float | None) -> None:
    """Predicted points: the prediction interval ``value x (1 +- rel)`` (``rel`` from the probes' leave-one-out
    errors, :mod:`lotus.model.check`); None when the model could not be checked."""
    for p in matrix:
        if p.how == "predicted" and p.samples_per_s and rel is not None:
            p.pi95 = [p.samples_per_s * max(1.0 - rel, 0.0), p.samples_per_s * (1.0 + rel)]


def interpolate(matrix: list[Point]) -> int:
    """Where the model does not hold: an unmeasured point between two measured CPU counts of its page-cache
    size takes the model's prediction scaled by the measured/predicted ratio of those two points
    (interpolated linearly in CPUs: the model's shape, the measurements' level; kept between the two
    measurements), or the straight line between them without predictions; its interval the span of the two
    measurements' intervals. On the GPU host's ResNet-18 (8 and 12 CPUs between measured 4 and 16) the
    straight line read -17% and -12%, the scaled shape -9% and -7%. Returns how many points were
    interpolated; points outside the measured CPU counts stay predicted."""
    done = 0
    for gb in {p.cache_gb for p in matrix}:
        row = sorted((p for p in matrix if p.cache_gb == gb), key=lambda q: q.cpus)
        meas = [p for p in row if p.measured and p.samples_per_s]
        for p in row:
            if p.measured:
                continue
            lo = [m for m in meas if m.cpus < p.cpus]
            hi = [m for m in meas if m.cpus > p.cpus]
            if not lo or not hi:
                continue
            a, b = lo[-1], hi[0]
            f = (p.cpus - a.cpus) / (b.cpus - a.cpus)
            if p.predicted_samples_per_s and a.predicted_samples_per_s and b.predicted_samples_per_s:
                # the model's shape, its level corrected to the measurements on both sides
                ra = a.samples_per_s / a.predicted_samples_per_s
                rb = b.samples_per_s / b.predicted_samples_per_s
                v = p.predicted_samples_per_s * (ra + f * (rb - ra))
                p.samples_per_s = min(max(v, min(a.samples_per_s, b.samples_per_s)),
                                      max(a.samples_per_s, b.samples_per_s))
            else:
                p.samples_per_s = a.samples_per_s + f * (b.samples_per_s - a.samples_per_s)
            lows, highs = [_lo(a.samples_per_s, a.ci95), _lo(b.samples_per_s, b.ci95)], \
                [_hi(a.samples_per_s, a.ci95), _hi(b.samples_per_s, b.ci95)]
            p.pi95 = [min(lows), max(highs)]
            p.how, p.num_workers = "interpolated", p.model_num_workers
            done += 1
    return done


def bisect_next(matrix: list[Point], cache_gb: float, precision: float) -> Point | None:
    """The CPU count to measure next when the model does not hold: at ``cache_gb``, the unmeasured point
    halfway (in grid steps) between the two neighbouring measured CPU counts whose rates differ most, when
    they differ by more than ``precision``; an unmeasured end of the grid (beyond every measured count) first.
    None when every neighbouring pair is settled."""
    row = sorted((p for p in matrix if p.cache_gb == cache_gb), key=lambda q: q.cpus)
    idx = [i for i, p in enumerate(row) if p.measured and p.samples_per_s]
    if not idx:
        return None
    if idx[0] > 0:
        return row[0]
    if idx[-1] < len(row) - 1:
        return row[-1]
    best, gap = None, precision
    for i, j in itertools.pairwise(idx):
        if j - i < 2:
            continue
        a, b = row[i].samples_per_s, row[j].samples_per_s
        diff = abs(b - a) / max(min(a, b), 1e-9)
        if diff > gap:
            best, gap = row[(i + j) // 2], diff
    return best


def demand(matrix: list[Point], target: float) -> dict | None:
    """The fewest CPUs, then the least cache, whose throughput reaches ``target`` of the best."""
    rated = [p for p in matrix if p.samples_per_s]
    if not rated:
        return None
    best = max(p.samples_per_s for p in rated)
    ok = [p for p in rated if p.samples_per_s >= target * best]
    p = min(ok, key=lambda q: (q.cpus, q.cache_gb))
    return {"cpus": p.cpus, "cache_gb": p.cache_gb, "samples_per_s": p.samples_per_s, "best_samples_per_s": best,
            "share_of_best": p.samples_per_s / best, "measured": p.measured, "num_workers": p.num_workers,
            "ci95": p.ci95, "how": p.how, "pi95": p.pi95, "note": p.note}


def _range(p: Point) -> tuple[float, float]:
    r = p.ci95 or p.pi95
    return (r[0], r[1]) if r else (p.samples_per_s, p.samples_per_s)


def demand_doubt(matrix: list[Point], dem: dict | None, target: float) -> str | None:
    """'cannot tell ...' when the intervals leave the demand open: a point of fewer CPUs (same cache) whose
    interval reaches ``target`` of the best's lower bound, or a demand point whose interval's lower end falls
    below ``target`` of the best's upper end; None when the intervals settle it."""
    if not dem:
        return None
    rated = [p for p in matrix if p.samples_per_s]
    best = max(rated, key=lambda q: q.samples_per_s)
    at = next((p for p in rated if (p.cpus, p.cache_gb) == (dem["cpus"], dem["cache_gb"])), None)
    if at is None:
        return None
    fewer = [p for p in rated if p.cache_gb == at.cache_gb and p.cpus < at.cpus
             and _range(p)[1] >= target * _range(best)[0]]
    if fewer:
        q = min(fewer, key=lambda x: x.cpus)
        return (f"cannot tell whether {q.cpus} CPUs already reach {target:.0%} of the best: its interval reaches "
                f"it ({_range(q)[0]:,.0f}-{_range(q)[1]:,.0f} samples/s); measure longer to settle the demand")
    if at is not best and _range(at)[0] < target * _range(best)[1]:
        return (f"cannot tell whether {at.cpus} CPUs reach {target:.0%} of the best: the intervals overlap "
                f"({_range(at)[0]:,.0f}-{_range(at)[1]:,.0f} against the best's {_range(best)[0]:,.0f}-"
                f"{_range(best)[1]:,.0f}); the demand may be more")
    return None


def next_point(matrix: list[Point], dem: dict) -> tuple[Point | None, str]:
    """The point to probe next: the demand point, then the best point it is measured against (an unsettled
    point counts with the model's prediction), when unmeasured or unsettled; (None, "") when both are measured."""
    at = {(p.cpus, p.cache_gb): p for p in matrix}
    d = at.get((dem["cpus"], dem["cache_gb"]))
    if d is not None and (not d.measured or d.unsettled):
        return d, "demand"
    rated = [p for p in matrix if p.samples_per_s]

    def potential(q: Point) -> float:
        return max(q.samples_per_s, q.predicted_samples_per_s or 0.0) if q.unsettled else q.samples_per_s

    top = max(rated, key=lambda q: (potential(q), -q.cpus)) if rated else None
    if top is not None and (not top.measured or top.unsettled):
        return top, "best"
    return None, ""


__all__ = ["FILES_UNKNOWN", "Point", "apply_measured", "best_workers", "bisect_next", "cache_grid", "check_grids",
           "cpu_grid", "default_workers", "demand", "demand_doubt", "hit_rate", "interpolate", "monotone", "next_point",
           "predict", "room_grid", "with_interval"]
