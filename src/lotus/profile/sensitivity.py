"""CPU x memory sensitivity of a job (Synergy's profiler without docker or root), mostly predicted.

Synergy measures a job's throughput at every (CPUs, memory) point inside containers it starts as root.
Here a few probes through :func:`lotus.launch.launch` (CPU affinity + a worker count; page cache
emulated by evicting the dataset's files and reading back a share of them) fit :mod:`lotus.model`, which
predicts the rest of the matrix ("optimistic profiling"). Every probe follows the one probe protocol (it
ends once its samples/s is known to +-``precision``, or at its caps) and every point carries the
worker count it is for: the one the model finds best for those CPUs (the fewest within 2% of the best
prediction), not a fixed CPUs - 1.

1. ``c<max>-as-is``: all CPUs, the page cache as found (also lists the dataset's files);
2. ``c<min>-warm``: the fewest CPUs of the grid, warm (identifies how the pipeline scales with CPUs);
3. ``c<max>-cold``: all CPUs, the dataset evicted (the cost of reading from disk);
4. the model, fitted on these, predicts every point (cache sizes enter as hit rates simulated from the
   job's recorded sample order). The demand point (the fewest CPUs, then GB, reaching ``target`` of the
   best throughput) is then probed, the model refitted, and the demand recomputed until it lands on a
   measured point (within ``max_probes`` and ``max_minutes``; otherwise the note says it is predicted).
5. the matrix is made monotone where the model says it must be (more CPUs, each with its best worker
   count, or more cache never lower): a predicted point is clamped between the measured points around it.

Each probe has its own trace directory under ``out``; a probe whose directory already holds a finished
run (``lotus-run.json`` with exit code 0) is reused, so an interrupted profile resumes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus.launch import LaunchOptions, launch
from lotus.profile import pagecache
from lotus.profile.stalls import listed_files

_log = logging.getLogger("lotus.profile")
GB = 1e9


@dataclass
class Point:
    cpus: int
    cache_gb: float
    samples_per_s: float | None
    measured: bool
    predicted_samples_per_s: float | None = None
    bottleneck: str | None = None
    probe: str | None = None
    num_workers: int | None = None  # the worker count the point is for (the model's best for these CPUs)
    ci95: list[float] | None = None  # measured points: the probe's 95% interval
    cache_state: str | None = None  # measured points: the page cache as the probe ran (as-is, warm, cold, N GB)


@dataclass
class Profile:
    command: list[str]
    cpus_grid: list[int]
    cache_grid_gb: list[float]
    dataset_bytes: float | None
    matrix: list[Point] = field(default_factory=list)
    demand: dict | None = None
    target: float = 0.95
    probes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    full_sweep_estimate_s: float | None = None

    def to_dict(self) -> dict:
        return {"command": self.command, "cpus_grid": self.cpus_grid, "cache_grid_gb": self.cache_grid_gb,
                "dataset_bytes": self.dataset_bytes, "target": self.target,
                "matrix": [vars(p) for p in self.matrix], "demand": self.demand, "probes": self.probes,
                "notes": self.notes, "seconds": self.seconds, "full_sweep_estimate_s": self.full_sweep_estimate_s}


def cpu_grid(allowed: list[int]) -> list[int]:
    """1, 2, 4, 8... up to the number of CPUs this process may use (and that number)."""
    n = len(allowed)
    out, v = [], 1
    while v < n:
        out.append(v)
        v *= 2
    return [*out, n]


def _cpu_set(allowed: list[int], n: int) -> list[int]:
    return sorted(allowed)[:n]


class _Prober:
    """Runs (or reuses) probes: affinity, workers and page-cache state per point."""

    def __init__(self, command, out: Path, steps: int, allowed: list[int], timeout_s, deadline: float, progress,
                 precision: float | None = None, max_seconds: float | None = None):
        self.command, self.out, self.steps, self.allowed = command, out, steps, allowed
        self.precision, self.max_seconds = precision or None, max_seconds
        self.timeout_s, self.deadline, self.progress = timeout_s, deadline, progress
        self.files: list[str] = []
        self.log: list[dict] = []

    def run(self, name: str, cpus: int, cache: str | float, *, workers: int | None = None,
            list_files: bool = False) -> dict | None:
        trace = self.out / name
        done = _finished(trace)
        if done is None:
            if time.monotonic() > self.deadline:
                return None
            workers = default_workers(cpus) if workers is None else workers
            self.progress(f"{name} ({workers} workers)")
            self._set_cache(cache)
            probe = launch(self.command, LaunchOptions(
                trace_dir=trace, steps=self.steps, precision=self.precision,
                max_seconds=self.max_seconds if self.precision else None, cpus=_cpu_set(self.allowed, cpus),
                workers=workers, capture=True, timeout_s=self.timeout_s, list_dataset_files=list_files))
            s = probe.summary()
            label = cache if isinstance(cache, str) else f"{float(cache) / GB:.3g} GB"
            done = {"name": name, "trace_dir": str(trace), "cpus": cpus, "cache": cache, "cache_state": label,
                    "num_workers": workers, "exit_code": probe.exit_code, "wall_s": probe.wall_s,
                    "samples_per_s": s.get("samples_per_s"), "ci95": s.get("ci95"), "stopped_by": probe.stopped_by,
                    "reused": False, "stderr_tail": probe.stderr_tail()[-1500:] if probe.exit_code else ""}
            (trace / "lotus-probe.json").write_text(json.dumps(done))
        if list_files and not self.files:
            self.files = listed_files(trace)
        self.log.append(done)
        return done

    def _set_cache(self, cache: str | float) -> None:
        if not self.files or cache == "as-is":
            return
        if cache == "warm":
            pagecache.warm(self.files)
            return
        pagecache.evict(self.files)
        if cache != "cold" and float(cache) > 0:  # a budget in bytes: a fixed random share stays cached
            import random

            order = list(self.files)
            random.Random(0).shuffle(order)
            pagecache.warm(order, budget_bytes=int(float(cache)))


def default_workers(cpus: int) -> int:
    """Before any model: CPUs - 1 workers (the main process keeps one), none on one CPU."""
    return max(cpus - 1, 1) if cpus > 1 else 0


def best_workers(model, cpus: int, cache_hit_rate=None, near_best: float = 0.02):
    """(workers, prediction): the fewest workers whose predicted samples/s on ``cpus`` CPUs is within
    ``near_best`` of the best over 0 .. 2 x cpus (more workers than that only share the same CPUs)."""
    preds = {}
    for w in range(0, 2 * cpus + 1):
        p = model.predict(w, float(cpus), cache_hit_rate=cache_hit_rate)
        if p.samples_per_s:
            preds[w] = p
    if not preds:
        return default_workers(cpus), model.predict(default_workers(cpus), float(cpus), cache_hit_rate=cache_hit_rate)
    top = max(p.samples_per_s for p in preds.values())
    w = min(w for w, p in preds.items() if p.samples_per_s >= (1 - near_best) * top)
    return w, preds[w]


def _finished(trace: Path) -> dict | None:
    try:
        done = json.loads((trace / "lotus-probe.json").read_text())
    except (OSError, ValueError):
        return None
    if done.get("exit_code") != 0:
        return None
    done["reused"] = True
    return done


def sensitivity(command: list[str], out: str | os.PathLike, *, steps: int = 600, cpus_grid: list[int] | None = None,
                cache_grid_gb: list[float] | None = None, target: float = 0.95,
                max_probes: int = 6, max_minutes: float = 30.0, timeout_s: float | None = None,
                progress=None, precision: float | None = 0.03, max_seconds: float | None = 90.0) -> Profile:
    """Profile ``command`` (see the module doc)."""
    from lotus.model import fit, load_run

    t0 = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    grid = sorted({c for c in (cpus_grid or cpu_grid(allowed)) if 1 <= c <= len(allowed)})
    prober = _Prober(command, out, steps, allowed, timeout_s, t0 + max_minutes * 60, progress or (lambda n: None),
                     precision=precision, max_seconds=max_seconds)
    profile = Profile(command=list(command), cpus_grid=grid, cache_grid_gb=[], dataset_bytes=None, target=target)
    first = prober.run(f"c{grid[-1]}-as-is", grid[-1], "as-is", list_files=True)
    if first is None or first["exit_code"] != 0 or first["samples_per_s"] is None:
        profile.notes.append("the first probe failed or traced no DataLoader; nothing else was run")
        profile.probes = prober.log
        return profile
    if prober.files:
        profile.dataset_bytes = float(sum(os.path.getsize(f) for f in prober.files if os.path.exists(f)))
    else:
        profile.notes.append("the dataset's files are unknown: memory is not profiled (CPUs only)")
    runs = [load_run(first["trace_dir"])]
    if len(grid) > 1:
        low = prober.run(f"c{grid[0]}-warm", grid[0], "warm")
        if low and low["exit_code"] == 0:
            runs.append(load_run(low["trace_dir"]))
    if prober.files:
        cold = prober.run(f"c{grid[-1]}-cold", grid[-1], "cold")
        if cold and cold["exit_code"] == 0:
            runs.append(load_run(cold["trace_dir"], cache_state="cold"))
    dataset_gb = (profile.dataset_bytes or 0) / GB
    profile.cache_grid_gb = cache_grid_gb or ([round(dataset_gb * f, 3) for f in (0, 0.25, 0.5, 0.75, 1.0)]
                                              if profile.dataset_bytes else [])
    measured: dict[tuple[int, float], dict] = {}
    top_gb = profile.cache_grid_gb[-1] if profile.cache_grid_gb else 0.0
    for p in prober.log:
        key = (p["cpus"], 0.0 if p["cache"] == "cold" else top_gb)
        measured[key] = p
    hits = _hit_rates(runs[0], profile.dataset_bytes)
    bps = (profile.dataset_bytes / max(len(prober.files), 1)) if prober.files else None
    seen: set[tuple[int, float, int | None]] = set()
    while True:
        model = fit(runs, bytes_per_sample=bps)
        profile.matrix = _predict(model, grid, profile.cache_grid_gb, hits, profile.dataset_bytes)
        _apply_measured(profile.matrix, measured)
        _monotone(profile.matrix)
        demand = _demand(profile.matrix, target)
        profile.demand = demand
        if demand is None:
            break
        todo = demand if not demand["measured"] else _best_unmeasured(profile.matrix)
        if todo is None:  # the demand point and the best point it is measured against are both measured
            break
        key = (todo["cpus"], todo["cache_gb"])
        what = "demand" if todo is demand else "best"
        if len(prober.log) >= max_probes or (*key, todo.get("num_workers")) in seen:
            profile.notes.append(f"the {what} point ({key[0]} CPUs, {key[1]:g} GB) is predicted, not measured: "
                                 + ("the probe budget is spent" if len(prober.log) >= max_probes
                                    else "its probe did not settle it"))
            break
        seen.add((*key, todo.get("num_workers")))
        budget = "cold" if todo["cache_gb"] == 0 else ("warm" if todo["cache_gb"] >= dataset_gb
                                                          else todo["cache_gb"] * GB)
        probe = prober.run(f"c{key[0]}-m{key[1]:g}-w{todo.get('num_workers')}", key[0], budget,
                           workers=todo.get("num_workers"))
        if probe is None or probe["exit_code"] != 0 or probe["samples_per_s"] is None:
            profile.notes.append("stopped early: the time budget is spent or a probe failed; the demand point is "
                                 "predicted, not measured")
            break
        measured[key] = probe
        runs.append(load_run(probe["trace_dir"], cache_state="cold" if budget == "cold" else None))
    profile.probes = prober.log
    profile.seconds = time.monotonic() - t0
    per_probe = [p["wall_s"] for p in prober.log if not p.get("reused")]
    if per_probe:
        profile.full_sweep_estimate_s = sum(per_probe) / len(per_probe) * len(profile.matrix)
    return profile


def _hit_rates(run, dataset_bytes):
    """Steady LRU hit rates per cache fraction of the job's recorded sample order (None: unknown)."""
    if dataset_bytes is None:
        return None
    from lotus.model.cache import access_epochs, cache_hit_rates, steady_hit_rates

    epochs = access_epochs(run.events)
    if not epochs:
        return None
    n = max((d.get("dataset_len") or 0 for d in run.loaders.values() if isinstance(d, dict)), default=0) or None
    return steady_hit_rates(cache_hit_rates(epochs, n, n_epochs=3, policies=("lru",)))


def _apply_measured(matrix: list[Point], measured: dict) -> None:
    """Measured rates replace predictions, unless the probe ran another worker count than the model now finds
    best for those CPUs and the model expects clearly more there (above the probe's interval): then the point
    keeps the prediction at the model's worker count (and is probed again if it matters)."""
    for p in matrix:
        m = measured.get((p.cpus, p.cache_gb))
        if m is not None and m.get("samples_per_s") is not None:
            if m.get("num_workers") is not None and p.num_workers is not None and m["num_workers"] != p.num_workers:
                hi = (m.get("ci95") or [None, m["samples_per_s"] * 1.02])[1]
                if p.predicted_samples_per_s and p.predicted_samples_per_s > hi:
                    continue
            p.measured, p.samples_per_s, p.probe = True, m["samples_per_s"], m["name"]
            p.ci95, p.cache_state = m.get("ci95"), m.get("cache_state") or str(m.get("cache"))
            if m.get("num_workers") is not None:
                p.num_workers = m["num_workers"]


def _monotone(matrix: list[Point]) -> None:
    """Clamp each predicted point between the measured points it must not beat or fall below (fewer or
    equal CPUs and cache: at least theirs; more or equal: at most theirs)."""
    meas = [p for p in matrix if p.measured and p.samples_per_s]
    for p in matrix:
        if p.measured or not p.samples_per_s:
            continue
        lo = max((m.samples_per_s for m in meas if m.cpus <= p.cpus and m.cache_gb <= p.cache_gb), default=None)
        hi = min((m.samples_per_s for m in meas if m.cpus >= p.cpus and m.cache_gb >= p.cache_gb), default=None)
        v = p.samples_per_s
        if hi is not None:
            v = min(v, hi)
        if lo is not None:
            v = max(v, lo)
        p.samples_per_s = v


def _predict(model, grid, cache_gb, hits, dataset_bytes) -> list[Point]:
    from lotus.model.tables import hit_rate_at

    points = []
    for gb in cache_gb or [None]:
        if gb is None:
            h = None
        elif hits is not None and dataset_bytes:
            h = hit_rate_at(hits, gb, dataset_bytes)
        else:
            h = min(gb * GB / dataset_bytes, 1.0) if dataset_bytes else None
        for c in grid:
            w, p = best_workers(model, c, cache_hit_rate=h)
            points.append(Point(cpus=c, cache_gb=gb if gb is not None else 0.0, samples_per_s=p.samples_per_s,
                                measured=False, predicted_samples_per_s=p.samples_per_s, bottleneck=p.bottleneck,
                                num_workers=w))
    return points


def _best_unmeasured(matrix: list[Point]) -> dict | None:
    """The point with the highest rate when it is not measured (the demand's target is a share of it)."""
    rated = [p for p in matrix if p.samples_per_s]
    if not rated:
        return None
    top = max(rated, key=lambda q: (q.samples_per_s, -q.cpus))
    return None if top.measured else {"cpus": top.cpus, "cache_gb": top.cache_gb, "num_workers": top.num_workers}


def _demand(matrix: list[Point], target: float) -> dict | None:
    """The fewest CPUs, then the least cache, whose throughput reaches ``target`` of the best."""
    rated = [p for p in matrix if p.samples_per_s]
    if not rated:
        return None
    best = max(p.samples_per_s for p in rated)
    ok = [p for p in rated if p.samples_per_s >= target * best]
    p = min(ok, key=lambda q: (q.cpus, q.cache_gb))
    return {"cpus": p.cpus, "cache_gb": p.cache_gb, "samples_per_s": p.samples_per_s, "best_samples_per_s": best,
            "measured": p.measured, "num_workers": p.num_workers, "ci95": p.ci95}
