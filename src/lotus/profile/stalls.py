"""Data-stall split (DS-Analyzer's differential analysis) from three short probes of an unmodified job.

Every probe is ``lotus.launch.launch(command, steps=S)`` into its own trace directory:

1. **listing** (``LOTUS_DATASET_FILES``): the job's loaders write their dataset's file list; those files
   (or ``--data PATH``'s) are then read once so that the page cache holds them (when they fit);
2. **warm**: the job as it is, data in the page cache -> ``prep_samples_per_s``;
3. **cold**: the dataset's files evicted from the page cache first (``posix_fadvise``, no root)
   -> ``fetch_samples_per_s``;
4. **ingestion**: lotus replays already-prepared batches (``LOTUS_REPLAY``), so the loop runs at the
   rate the model/GPU ingests data -> ``ingestion_samples_per_s``.

Per iteration (batch): the warm iteration is ``B / prep rate``; its **prep stall** is the loop's directly
measured wait for data in the warm probe (its wait share inside the rate's window, epoch starts in);
**compute** = B / ingestion rate (at most the rest); what remains is **loop overhead** with a live
pipeline (receiving batches from workers, host-to-device copies of fresh batches, the main process's CPU
shared with the workers), which DS-Analyzer's differential analysis (prep stall = B / prep rate -
compute, used when the warm probe traced no waits) counts as stall. **fetch stall** = B / fetch rate -
B / prep rate (negatives, i.e. noise, clipped to 0); shares are of the cold iteration time. Rates are
the one steady-state measure (:mod:`lotus.analysis.throughput`) with their 95% intervals; every probe
but the replay follows the one probe protocol (it ends once its rate is known to +-``precision``, or at
its caps). The split's intervals come from the rates' (normal draws around each
rate, the split recomputed per draw with the wait share held: 2.5th-97.5th percentiles).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus.launch import LaunchOptions, launch
from lotus.profile import pagecache

_log = logging.getLogger("lotus.profile")


@dataclass
class ProbeResult:
    name: str
    trace_dir: str
    exit_code: int
    wall_s: float
    samples_per_s: float | None
    wait_share: float | None
    note: str | None = None
    stderr_tail: str = ""
    ci95: list[float] | None = None
    stopped_by: str | None = None
    steady_wait_share: float | None = None  # the loop's measured waits, first batch of each epoch left out
    window_wait_share: float | None = None  # the loop's measured waits inside the rate's window (epoch starts in)
    rate_note: str | None = None  # the rate's own note (an interval wider than the target, a short window...)


@dataclass
class StallReport:
    command: list[str]
    batch_size: int | None
    probes: dict[str, ProbeResult] = field(default_factory=dict)
    files: int = 0
    dataset_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    def rate(self, name: str) -> float | None:
        p = self.probes.get(name)
        return p.samples_per_s if p is not None and p.exit_code == 0 else None

    def _ci(self, name: str):
        p = self.probes.get(name)
        return p.ci95 if p is not None and p.exit_code == 0 else None

    def split(self) -> dict:
        """compute / prep stall / fetch stall per iteration (ms and share of the cold iteration), with 95%
        intervals (``*_ci95``), and the warm probe's measured wait share beside its stall share."""
        b = self.batch_size
        ingest, warm, cold = self.rate("ingestion"), self.rate("warm"), self.rate("cold")
        w = self.probes.get("warm")
        ok = w is not None and w.exit_code == 0
        wait = w.window_wait_share if ok else None
        out = {"ingestion_samples_per_s": ingest, "prep_samples_per_s": warm, "fetch_samples_per_s": cold,
               "ingestion_ci95": self._ci("ingestion"), "prep_ci95": self._ci("warm"), "fetch_ci95": self._ci("cold"),
               **_split(b, ingest, warm, cold, wait),
               "warm_measured_wait_share": wait, "warm_steady_wait_share": w.steady_wait_share if ok else None,
               "differential_stall_share": _split(b, ingest, warm, cold)["warm_stall_share"]}
        keys = [f"{k}_{u}" for k in ("compute", "loop_overhead", "prep_stall", "fetch_stall") for u in ("ms", "share")]
        keys.append("warm_stall_share")
        for k in keys:
            out[f"{k}_ci95"] = None
        if not b or not ingest:
            return out
        draws = _draws({"ingestion": (ingest, out["ingestion_ci95"]), "warm": (warm, out["prep_ci95"]),
                        "cold": (cold, out["fetch_ci95"])})
        if draws is not None:
            rows = [_split(b, i, w_, c, wait) for i, w_, c in zip(draws["ingestion"], draws["warm"], draws["cold"],
                                                                    strict=True)]
            for k in keys:
                vals = [r[k] for r in rows if r[k] is not None]
                if out[k] is not None and len(vals) > 100:
                    vals.sort()
                    out[f"{k}_ci95"] = [vals[int(0.025 * len(vals))], vals[int(0.975 * len(vals)) - 1]]
        return out

    def to_dict(self) -> dict:
        return {"command": self.command, **self.split(), "files": self.files, "dataset_bytes": self.dataset_bytes,
                "notes": self.notes, "probes": {k: vars(v) for k, v in self.probes.items()}}


def _split(b, ingest, warm, cold, wait_share=None) -> dict:
    out = {"batch_size": b, "compute_ms": None, "loop_overhead_ms": None, "prep_stall_ms": None,
           "fetch_stall_ms": None, "iteration_ms": None, "compute_share": None, "loop_overhead_share": None,
           "prep_stall_share": None, "fetch_stall_share": None, "warm_stall_share": None,
           "stall_source": None}
    if not b or not ingest:
        return out
    compute = b / ingest * 1e3
    overhead = 0.0
    total = compute
    if warm:
        it = b / warm * 1e3
        if wait_share is not None:  # the loop's own waits: the stall; compute and loop overhead the rest
            prep = it * min(max(wait_share, 0.0), 1.0)
            compute = min(compute, it - prep)
            overhead = it - prep - compute
            out["stall_source"] = "measured wait"
        else:  # DS-Analyzer's differential analysis
            prep = max(0.0, it - compute)
            out["stall_source"] = "differential"
        out["prep_stall_ms"] = prep
        total = compute + overhead + prep
        out["warm_stall_share"] = prep / total if total else None
        if cold:
            fetch = max(0.0, b / cold * 1e3 - total)
            out["fetch_stall_ms"] = fetch
            total += fetch
    out["compute_ms"], out["loop_overhead_ms"] = compute, overhead if warm else None
    out["iteration_ms"] = total
    for k in ("compute", "loop_overhead", "prep_stall", "fetch_stall"):
        v = out[f"{k}_ms"]
        out[f"{k}_share"] = None if v is None or not total else v / total
    return out


def _draws(rates: dict, n: int = 2000):
    """Normal draws around each rate (its interval's half-width / 1.96 as the standard error); a rate without
    an interval is held fixed. None when no rate has an interval."""
    import numpy as np

    rng = np.random.default_rng(0)
    out, any_ci = {}, False
    for name, (rate, ci) in rates.items():
        if rate is None:
            out[name] = [None] * n
        elif ci:
            any_ci = True
            se = (ci[1] - rate) / 1.96
            out[name] = list(np.maximum(rng.normal(rate, se, n), rate * 0.05))
        else:
            out[name] = [rate] * n
    return out if any_ci else None


def files_under(path: str | os.PathLike) -> list[str]:
    """Every regular file under ``path`` (a directory) or ``path`` itself."""
    p = Path(path)
    if p.is_file():
        return [str(p)]
    return sorted(str(f) for f in p.rglob("*") if f.is_file())


def listed_files(trace_dir: Path) -> list[str]:
    out: list[str] = []
    for f in sorted(trace_dir.glob("lotus-dataset-r*-l*.files")):
        out += [line for line in f.read_text().splitlines() if line]
    return list(dict.fromkeys(out))


def _probe(name: str, command, out: Path, base: LaunchOptions, **extra) -> ProbeResult:
    adaptive = not extra.get("replay")  # a replay probe runs its fixed length (its first batches are prepared)
    opts = LaunchOptions(trace_dir=out / name, steps=extra.pop("steps", base.steps), workers=base.workers,
                         cpus=base.cpus,
                         precision=base.precision if adaptive else None,
                         max_seconds=base.max_seconds if adaptive and base.precision else None,
                         capture=True, env=dict(base.env), timeout_s=base.timeout_s, **extra)
    probe = launch(command, opts)
    note = None
    tail = probe.stderr_tail()[-2000:] if probe.exit_code != 0 else ""
    if probe.exit_code != 0:
        last = tail.strip().splitlines()
        note = f"exit code {probe.exit_code}" + (f": {last[-1].strip()}" if last else "")
    s = probe.summary() if probe.trace_dir is not None else {}
    if probe.exit_code == 0 and not s.get("traced"):
        note = "the command created no DataLoader"
    return ProbeResult(name=name, trace_dir=str(opts.trace_dir), exit_code=probe.exit_code, wall_s=probe.wall_s,
                       samples_per_s=s.get("samples_per_s"), wait_share=s.get("wait_share"), note=note,
                       stderr_tail=tail, ci95=s.get("ci95"),
                       stopped_by=probe.stopped_by, steady_wait_share=s.get("steady_wait_share"),
                       window_wait_share=s.get("window_wait_share"), rate_note=s.get("note"))


def stalls(command: list[str], out: str | os.PathLike, *, steps: int = 600, data: str | None = None,
           workers: int | None = None, cpus: list[int] | None = None, replay_batches: int | None = None,
           timeout_s: float | None = None, progress=None, precision: float | None = 0.03,
           max_seconds: float | None = 90.0) -> StallReport:
    """Run the probes and return the split (see the module doc). ``progress(name)`` is called per probe."""
    out = Path(out)
    base = LaunchOptions(steps=steps, workers=workers, cpus=cpus, timeout_s=timeout_s, precision=precision or None,
                         max_seconds=max_seconds)
    report = StallReport(command=list(command), batch_size=None)
    step = progress or (lambda name: None)

    step("listing")
    listing = _probe("listing", command, out, base, list_dataset_files=True)
    report.probes["listing"] = listing
    if listing.exit_code != 0 or listing.note == "the command created no DataLoader":
        report.notes.append(f"the first probe failed ({listing.note}); nothing else was run")
        return report
    files = files_under(data) if data else listed_files(Path(listing.trace_dir))
    report.files = len(files)
    report.batch_size = _batch_size(Path(listing.trace_dir))
    if files:
        report.dataset_bytes = sum(os.path.getsize(f) for f in files if os.path.exists(f))
        avail, bound = pagecache.cache_room()
        if avail is not None and report.dataset_bytes > 0.8 * avail:
            where = "the free memory" if bound == "memory" else f"what the memory limit of {bound} leaves"
            report.notes.append(f"the dataset ({report.dataset_bytes / 2**30:.1f} GiB) does not fit in {where} "
                                f"({avail / 2**30:.1f} GiB): the 'warm' probe is partly cold")
        pagecache.warm(files, budget_bytes=int(0.8 * avail) if avail else None)
    else:
        report.notes.append("the dataset's files are unknown (no samples/files attribute found; give --data PATH): "
                            "the cold-cache probe is skipped")

    step("warm")
    report.probes["warm"] = _probe("warm", command, out, base)
    if files:
        step("cold")
        evicted = pagecache.evict(files)
        if evicted.failed:
            report.notes.append(f"{evicted.failed} file(s) could not be evicted ({evicted.first_error})")
        left = pagecache.resident(files)
        if left is not None and left > 0.5:
            report.notes.append(f"{left:.0%} of the dataset stayed in the page cache after eviction: the cold "
                                "probe is skipped")
        else:
            report.probes["cold"] = _probe("cold", command, out, base)
    step("ingestion")
    k = replay_batches or max(1, min(10, steps // 5))
    report.probes["ingestion"] = _probe("ingestion", command, out, base, replay=k,
                                        steps=min(steps, max(5 * k, 100)))
    if files:
        pagecache.warm(files, budget_bytes=int(0.8 * (pagecache.cache_room()[0] or 0)) or None)  # leave it as found
    for p in report.probes.values():
        if p.note:
            report.notes.append(f"probe {p.name}: {p.note}" + ("; the split goes on without it" if p.exit_code else ""))
        elif p.rate_note and p.name != "listing":
            report.notes.append(f"probe {p.name}: {p.rate_note}")
    return report


def _batch_size(trace_dir: Path) -> int | None:
    """Samples per batch of the job's main loader (the one that handed out the most batches)."""
    from lotus.analysis.runs import load_config
    from lotus.analysis.throughput import throughput

    try:
        cfg = load_config(trace_dir)
    except Exception:
        return None
    t = throughput(cfg.batches, cfg.loaders)
    return round(t["samples"] / t["batches"]) or None if t["batches"] else None


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
