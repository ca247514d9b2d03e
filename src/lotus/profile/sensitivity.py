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
   A failed probe does not end the search: its worker count is left out for those CPUs and the model's
   next-best one is probed (its stderr tail is kept and noted). A note always says why the search stopped.
   Then a control probe measures the narrowest probe's setting again: where the two runs differ beyond their
   own intervals, every interval of the matrix carries the spread they show (:mod:`lotus.analysis.runspread`).
5. the matrix is made monotone where the model says it must be (more CPUs, each with its best worker
   count, or more cache never lower): see :mod:`lotus.profile.matrix`. A measured point always shows
   its measurement.

When the dataset's files are unknown nothing can be evicted or warmed: every probe runs with the page
cache as found, and says so (``as found (dataset files unknown)``).

Each probe has its own trace directory under ``out``; a probe whose directory already holds a finished
run (``lotus-run.json`` with exit code 0) is reused, so an interrupted profile resumes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus.launch import LaunchOptions, launch
from lotus.profile import matrix as mx
from lotus.profile import pagecache
from lotus.profile.probefit import ProbeFit
from lotus.profile.stalls import listed_files

GB = 1e9


@dataclass
class Profile:
    command: list[str]
    cpus_grid: list[int]
    cache_grid_gb: list[float]
    dataset_bytes: float | None
    matrix: list[mx.Point] = field(default_factory=list)
    demand: dict | None = None
    target: float = 0.95
    probes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    full_sweep_estimate_s: float | None = None
    model_check: dict | None = None  # lotus.model.check.ModelCheck of the probes (leave-one-probe-out)
    control: dict | None = None  # lotus.analysis.runspread.Control: one setting measured again at the end

    def to_dict(self) -> dict:
        return {"command": self.command, "cpus_grid": self.cpus_grid, "cache_grid_gb": self.cache_grid_gb,
                "dataset_bytes": self.dataset_bytes, "target": self.target,
                "matrix": [vars(p) for p in self.matrix], "demand": self.demand, "probes": self.probes,
                "notes": self.notes, "seconds": self.seconds, "full_sweep_estimate_s": self.full_sweep_estimate_s,
                "model_check": self.model_check, "control": self.control,
                "share_of_full_sweep": self.seconds / self.full_sweep_estimate_s if self.full_sweep_estimate_s
                else None}


def _cpu_set(allowed: list[int], n: int) -> list[int]:
    return sorted(allowed)[:n]


class _Prober:
    """Runs (or reuses) probes: affinity, workers and page-cache state per point."""

    def __init__(self, command, out: Path, steps: int, allowed: list[int], timeout_s, deadline: float, progress,
                 precision: float | None = None, max_seconds: float | None = None, launcher=None):
        self.command, self.out, self.steps, self.allowed = command, out, steps, allowed
        self.launcher = launcher or launch
        self.precision, self.max_seconds = precision or None, max_seconds
        self.timeout_s, self.deadline, self.progress = timeout_s, deadline, progress
        self.files: list[str] = []
        self.log: list[dict] = []

    def run(self, name: str, cpus: int, cache: str | float, *, workers: int | None = None,
            list_files: bool = False, control_of: str | None = None) -> dict | None:
        trace = self.out / name
        done = _finished(trace)
        if done is None:
            if time.monotonic() > self.deadline:
                return None
            workers = mx.default_workers(cpus) if workers is None else workers
            self.progress(f"{name} ({workers} workers)")
            started = time.time()
            self._set_cache(cache)
            probe = self.launcher(self.command, LaunchOptions(
                trace_dir=trace, steps=self.steps, precision=self.precision,
                max_seconds=self.max_seconds if self.precision else None, cpus=_cpu_set(self.allowed, cpus),
                workers=workers, capture=True, timeout_s=self.timeout_s, list_dataset_files=list_files))
            s = probe.summary()
            if list_files and not self.files:
                self.files = listed_files(trace)
            label = cache if isinstance(cache, str) else f"{float(cache) / GB:.3g} GB"
            done = {"name": name, "trace_dir": str(trace), "cpus": cpus, "cache": cache,
                    "cache_state": label if self.files else mx.FILES_UNKNOWN,
                    "num_workers": workers, "exit_code": probe.exit_code, "wall_s": probe.wall_s,
                    "samples_per_s": s.get("samples_per_s"), "ci95": s.get("ci95"),
                    "within_rel_halfwidth": s.get("within_rel_halfwidth"), "started_unix_s": started,
                    "control_of": control_of, "stopped_by": probe.stopped_by,
                    "note": s.get("note") or (None if s.get("traced") else s.get("reason")), "reused": False,
                    "stderr_tail": probe.stderr_tail()[-1500:] if probe.exit_code else ""}
            (trace / "lotus-probe.json").write_text(json.dumps(done))
        if list_files and not self.files:
            self.files = listed_files(trace)
        self.log.append(done)
        return done

    def budget(self, cache_gb: float, dataset_gb: float) -> str | float:
        """The page-cache state of a probe at ``cache_gb`` (as-is when the dataset's files are unknown)."""
        if not self.files:
            return "as-is"
        # the grid's sizes are rounded to the MB (matrix.cache_grid): its top is the whole dataset
        return "cold" if cache_gb == 0 else ("warm" if cache_gb >= round(dataset_gb, 3) else cache_gb * GB)

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
                progress=None, precision: float | None = 0.03, max_seconds: float | None = 90.0,
                launcher=None, control: bool = True) -> Profile:
    """Profile ``command`` (see the module doc). InputError for a CPU grid outside this process's CPUs or a
    negative cache size. ``launcher``: :func:`lotus.launch.launch` (a replay of recorded probes in tests).
    ``control``: after the search, measure its narrowest probe's setting again (on top of ``max_probes``)."""
    from lotus.model import load_run

    t0 = time.monotonic()
    from lotus._cpus import allowed as allowed_cpus

    allowed = allowed_cpus()
    grid = mx.check_grids(cpus_grid, cache_grid_gb, len(allowed))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prober = _Prober(command, out, steps, allowed, timeout_s, t0 + max_minutes * 60, progress or (lambda n: None),
                     precision=precision, max_seconds=max_seconds, launcher=launcher)
    profile = Profile(command=list(command), cpus_grid=grid, cache_grid_gb=[], dataset_bytes=None, target=target)
    first = prober.run(f"c{grid[-1]}-as-is", grid[-1], "as-is", list_files=True)
    if first is None or first["exit_code"] != 0 or first["samples_per_s"] is None:
        why = _failure(first) if first else "the time budget is spent"
        profile.notes.append(f"the first probe failed or traced no DataLoader ({why}); nothing else was run")
        profile.probes = prober.log
        return profile
    if prober.files:
        profile.dataset_bytes = float(sum(os.path.getsize(f) for f in prober.files if os.path.exists(f)))
    else:
        profile.notes.append("the dataset's files are unknown: memory is not profiled (CPUs only) and every probe "
                             "ran with the page cache as found")
    dataset_gb = (profile.dataset_bytes or 0) / GB
    profile.cache_grid_gb = cache_grid_gb or (mx.cache_grid(dataset_gb) if profile.dataset_bytes else [])
    if profile.dataset_bytes:  # a machine that cannot cache the whole dataset: the axis stops where it can
        profile.cache_grid_gb = mx.room_grid(profile.cache_grid_gb, cache_grid_gb is not None, dataset_gb,
                                             *pagecache.cache_room(), profile.notes)
    top_gb = profile.cache_grid_gb[-1] if profile.cache_grid_gb else 0.0
    first_run = load_run(first["trace_dir"])
    hits = _hit_rates(first_run, profile.dataset_bytes)
    bps = (profile.dataset_bytes / max(len(prober.files), 1)) if prober.files else None
    search = ProbeFit(bps, hits, profile.dataset_bytes)
    search.add(first, first_run, (grid[-1], top_gb if profile.cache_grid_gb else None, first["num_workers"]), None)
    if prober.files and search.model is not None and search.model.traced.disk_bytes_per_sample:
        counts = sorted({1, *(2 ** k for k in range(8) if 2 ** k <= 2 * grid[-1]), 2 * grid[-1]})
        profile.notes += search.replay(prober.files, counts)  # ~1 s a count
    failed: dict[int, set[int]] = {}
    measured: dict[tuple[int, float], list[dict]] = {(grid[-1], top_gb): [first]}

    def probe_at(name, cpus, gb, cache, workers, what=None):
        """Run one probe, checked against the model's prediction made before it. None: the budget is spent."""
        key = (cpus, gb if profile.cache_grid_gb else None, workers if workers is not None
               else mx.default_workers(cpus))
        before = search.before(key)
        p = prober.run(name, cpus, cache, workers=workers)
        if p is None:
            return None
        if not _ok(p):
            failed.setdefault(cpus, set()).add(p["num_workers"])
            profile.notes.append(f"probe {name} failed: {_failure(p)}; the search goes on without "
                                 f"{p['num_workers']} workers on {cpus} CPUs")
            return p
        measured.setdefault((cpus, gb), []).append(p)
        search.add(p, load_run(p["trace_dir"], cache_state="cold" if cache == "cold" else None), key, before)
        return p

    low = prober.budget(top_gb, dataset_gb) if prober.files else "as-is"
    if len(grid) > 1:
        probe_at(f"c{grid[0]}-{low if isinstance(low, str) else f'm{top_gb:g}'}", grid[0], top_gb, low, None)
    if prober.files:
        probe_at(f"c{grid[-1]}-cold", grid[-1], 0.0, "cold", None)
    seen: set[tuple[int, float, int | None]] = set()
    order_notes: list[str] = []
    while True:
        chk = search.check
        profile.matrix = _matrix(search, grid, profile, hits, failed, measured, chk)
        order_notes = mx.monotone(profile.matrix)
        profile.demand = mx.demand(profile.matrix, target)
        if profile.demand is None:
            stop = "the search stopped: no point of the matrix has a rate"
            break
        todo, what = None, ""
        if chk is not None and chk.holds is False:
            todo = mx.bisect_next(profile.matrix, top_gb if profile.cache_grid_gb else 0.0, 1.0 - target)
            what = "bisected" if todo is not None else ""
        if todo is None:
            todo, what = mx.next_point(profile.matrix, profile.demand)
        if todo is None:
            stop = ("the search stopped: the demand point and the best point it is measured against are measured"
                    + ("; between measured CPU counts the rate changes by less than "
                       f"{1 - target:.0%} where the model does not hold" if chk is not None and not chk.holds else ""))
            break
        key, w = (todo.cpus, todo.cache_gb), todo.model_num_workers
        where = f"the {what} point ({key[0]} CPUs, {w} workers, {key[1]:g} GB) is {todo.how}, not measured"
        if todo.measured:
            where = (f"the {what} point ({key[0]} CPUs, {key[1]:g} GB) is measured with {todo.num_workers} workers "
                     f"only; the model expects more with {w}")
        if len(prober.log) >= max_probes:
            stop = f"the search stopped: the probe budget is spent ({max_probes} probes); {where}"
            break
        if (*key, w) in seen:
            stop = f"the search stopped: {where}: its probe did not settle it"
            break
        seen.add((*key, w))
        name = f"c{key[0]}-m{key[1]:g}-w{w}"
        if probe_at(name, key[0], key[1], prober.budget(key[1], dataset_gb), w) is None:
            stop = f"the search stopped: the time budget is spent ({max_minutes:g} min); {where}"
            break
    chk = search.check
    profile.model_check = chk.to_dict() if chk is not None else None
    why = ""
    if control:
        ctl, why = _control(prober)
        if ctl is not None:
            profile.control = ctl.to_dict()
            before = profile.demand
            profile.matrix = _matrix(search, grid, profile, hits, failed, measured, chk)
            _apply_control(profile.matrix, ctl)
            order_notes = mx.monotone(profile.matrix)
            profile.demand = mx.demand(profile.matrix, target)
            why = ctl.note()
            if before and profile.demand and (before["cpus"], before["cache_gb"]) != \
                    (profile.demand["cpus"], profile.demand["cache_gb"]):
                why += (f"; with the control the demand moved from {before['cpus']} CPUs, {before['cache_gb']:g} GB "
                        f"to {profile.demand['cpus']} CPUs, {profile.demand['cache_gb']:g} GB "
                        f"({profile.demand['how']})")
    if search.unfit is not None:
        profile.notes.append(f"the model could not be fitted ({search.unfit}): measured points only, the others "
                             "interpolated between measured CPU counts or unknown")
    doubt = mx.demand_doubt(profile.matrix, profile.demand, target)
    profile.notes += [stop, *([why] if why else []), *(chk.notes if chk is not None else []), *order_notes,
                      *([doubt] if doubt else [])]
    if chk is not None and chk.holds is False:
        left = [p for p in profile.matrix if p.how == "predicted"]
        if left:
            cells = ", ".join(f"{p.cpus} CPUs/{p.cache_gb:g} GB" for p in left[:6]) + (" ..." if len(left) > 6 else "")
            profile.notes.append(f"not settled: the model does not hold for this job and {len(left)} point(s) are "
                                 f"outside the measured CPU counts (predicted, unchecked): {cells}")
    profile.probes = prober.log
    profile.seconds = time.monotonic() - t0
    per_probe = [p["wall_s"] for p in prober.log if not p.get("reused")]
    if per_probe:
        profile.full_sweep_estimate_s = sum(per_probe) / len(per_probe) * len(profile.matrix)
    return profile


def _matrix(search: ProbeFit, grid, profile: Profile, hits, failed, measured, chk) -> list[mx.Point]:
    """The matrix: measured points as measured, the rest predicted by the model chosen by cross-validation
    (with its prediction interval) or, where the model does not hold, interpolated between measured CPU
    counts."""
    if search.model is None:  # no model: every point unmeasured until measured (or interpolated)
        matrix = [mx.Point(cpus=c, cache_gb=gb, samples_per_s=None, measured=False, how="unknown",
                           num_workers=mx.default_workers(c), model_num_workers=mx.default_workers(c))
                  for gb in (profile.cache_grid_gb or [0.0]) for c in grid]
    else:
        matrix = mx.predict(search.model, grid, profile.cache_grid_gb, hits, profile.dataset_bytes, exclude=failed)
    mx.apply_measured(matrix, measured)
    if chk is not None and chk.holds is False:
        mx.interpolate(matrix)
    mx.with_interval(matrix, chk.prediction_interval if chk is not None else None)
    return matrix


def _control(prober: _Prober):
    """(Control, its note) of the search's probe with the narrowest interval for its rate
    (:func:`lotus.analysis.runspread.control_choice`) among those whose page-cache state can be set again (the
    first probe's "as found" cannot once the dataset's files are known), measured again now; (None, why not)."""
    from lotus.analysis.runspread import control_check, control_choice

    done = [p for p in prober.log if _ok(p) and not p.get("control_of") and (p["cache"] != "as-is" or not prober.files)]
    k = control_choice([_reading(p) for p in done])
    if k is None:
        return None, "no control probe: no successful probe ran with a page-cache state that can be set again"
    ref = done[k]
    rep = prober.run(f"{ref['name']}-control", ref["cpus"], ref["cache"], workers=ref["num_workers"],
                     control_of=ref["name"])
    if rep is None:
        return None, "no control probe: the time budget is spent"
    if not _ok(rep):
        return None, f"the control probe {rep['name']} failed: {_failure(rep)}; the search's rates stand as measured"
    setting = f"{ref['cpus']} CPUs, {ref['num_workers']} workers, page cache {ref.get('cache_state') or ref['cache']}"
    ctl = control_check(_reading(ref), _reading(rep), setting)
    return (ctl, "") if ctl is not None else (None, "no control probe: it measured no rate")


def _reading(p: dict):
    from lotus.analysis.runspread import Reading

    return Reading(p["name"], p["samples_per_s"], p.get("ci95"), p.get("within_rel_halfwidth"), p.get("started_unix_s"))


def _apply_control(matrix: list[mx.Point], ctl) -> None:
    """The control's setting shows the two probes' mean; every interval carries the spread the pair showed."""
    for p in matrix:
        if p.probe == ctl.first_probe and p.measured:
            p.samples_per_s, p.ci95 = ctl.pooled_samples_per_s, ctl.pooled_ci95
            p.note = "; ".join(filter(None, [p.note, f"the mean of {ctl.first_probe} and {ctl.repeat_probe}"]))
            continue
        p.ci95 = ctl.widen(p.samples_per_s, p.ci95)
        p.pi95 = ctl.widen(p.samples_per_s, p.pi95)


def _ok(p: dict) -> bool:
    return p["exit_code"] == 0 and p.get("samples_per_s") is not None


def _failure(p: dict) -> str:
    """'exit code 7: job: simulated OOM' (the last line of its stderr), or why it has no rate."""
    if p["exit_code"] != 0:
        lines = (p.get("stderr_tail") or "").strip().splitlines()
        return f"exit code {p['exit_code']}" + (f": {lines[-1].strip()}" if lines else "")
    return f"no steady rate ({p.get('note') or 'no batch traced'})"


def _hit_rates(run, dataset_bytes):
    """Steady LRU hit rates per cache fraction of the job's recorded sample order (None: unknown)."""
    if dataset_bytes is None:
        return None
    from lotus.model.accessorder import access_order
    from lotus.model.cache import DEFAULT_FRACTIONS, steady_hit_rates
    from lotus.model.tables import cache_hits

    n = max((d.get("dataset_len") or 0 for d in run.loaders.values() if isinstance(d, dict)), default=0) or None
    # the 3 simulated epochs' orders only, read flat (lotus.model.accessorder), not every event of the run
    hits = cache_hits(access_order(run, 3, n), n, fractions=DEFAULT_FRACTIONS, n_epochs=3, policies=("lru",))
    return None if hits is None else steady_hit_rates(hits)




__all__ = ["Profile", "sensitivity"]
