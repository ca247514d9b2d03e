"""lotus's answers against the job's own clock (issue 15, item 4): sensitivity, tune, whatif, stalls and the
throughput measure, each checked against benchmarks/reference_train.py (plain torch, no lotus) timing its own
steady state in the same session.

    python benchmarks/probe_validation.py --data JPEGS --out RES --arch resnet18 \\
        --phases throughput,sens,tune,whatif,stalls --cpus 1,2,4,8,12,16

Every phase writes RES/<arch>-<phase>.json and is skipped when that file exists (resume after a command
limit). Reference runs pin the job to the first N CPUs of this process (affinity) and run --ref-seconds of
steady state; lotus's commands launch the same script through lotus's launcher. Comparisons: relative
error of lotus's figure to the reference's, with both intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = str(ROOT / "benchmarks" / "reference_train.py")


def allowed() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def job(a, workers: int, seconds: float) -> list[str]:
    cmd = [sys.executable, REF]
    cmd += ["--synthetic", str(a.synthetic)] if a.synthetic else [str(a.data)]
    cmd += ["-a", a.arch, "-b", str(a.batch_size), "-j", str(workers), "--seconds", str(seconds)]
    return cmd + (["--bf16", "--channels-last"] if a.bf16 else []) + a.job_args


def reference(a, cpus: int, workers: int, tag: str) -> dict:
    """One run of the reference job on the first ``cpus`` CPUs; its own JSON plus the wall time."""
    out = Path(a.work) / f"ref-{a.arch}-{tag}.json"
    t0 = time.monotonic()
    cpu_set = allowed()[:cpus]
    r = subprocess.run([*job(a, workers, a.ref_seconds), "--json", str(out)], capture_output=True, text=True,
                       check=False, preexec_fn=lambda: os.sched_setaffinity(0, cpu_set), timeout=900,
                       env={**os.environ, "OMP_NUM_THREADS": str(cpus)})
    doc = json.loads(out.read_text()) if r.returncode == 0 and out.exists() else {"error": r.stderr[-1500:]}
    doc.update(wall_s=time.monotonic() - t0, cpus=cpus, workers=workers)
    print(f"  reference {tag}: {cpus} CPUs, {workers} workers: {doc.get('samples_per_s')} samples/s "
          f"{doc.get('ci95')}", flush=True)
    return doc


def lotus(*args, timeout: float = 1800) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "lotus", *map(str, args)], capture_output=True, text=True, check=False,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def err(x, ref) -> float | None:
    return None if not x or not ref else x / ref - 1.0


def phase_throughput(a) -> dict:
    """The one measure vs the job's clock in the same traced run, also with epochs barely longer than the ramp."""
    from lotus.analysis.throughput import summarize_run

    rows = []
    for workers in a.throughput_workers:
        trace = Path(a.work) / f"run-{a.arch}-w{workers}"
        own = Path(a.work) / f"run-{a.arch}-w{workers}.json"
        rc, _o, e, wall = lotus("run", "-o", trace, "--no-verdict", "--", *job(a, workers, a.ref_seconds),
                                "--json", own)
        if rc != 0:
            rows.append({"workers": workers, "error": e[-1500:]})
            continue
        mine, s = json.loads(own.read_text()), summarize_run(trace)
        rows.append({"workers": workers, "job": mine, "lotus": {k: s.get(k) for k in
                                                               ("samples_per_s", "ci95", "steady_batches", "window_s",
                                                                "left_out", "note")},
                     "error": err(s.get("samples_per_s"), mine.get("samples_per_s")), "wall_s": wall})
        print(f"  throughput w{workers}: lotus {s.get('samples_per_s')} vs job {mine.get('samples_per_s')}", flush=True)
    return {"rows": rows}


def phase_sens(a) -> dict:
    out = Path(a.work) / f"sens-{a.arch}"
    grid = ",".join(map(str, a.cpus))
    rc, o, e, wall = lotus("sensitivity", "--max-seconds", a.max_seconds, "--cpus-grid", grid, "--cache-gb", "1000",
                           "--max-probes", a.max_probes, "--out", out, "--json", "--", *job(a, 4, 100000))
    if rc != 0:
        return {"error": e[-3000:], "wall_s": wall}
    doc = json.loads(o)
    refs = {}
    for p in doc["matrix"]:
        refs[p["cpus"]] = reference(a, p["cpus"], p["num_workers"], f"sens-c{p['cpus']}")
    best = max((r.get("samples_per_s") or 0) for r in refs.values())
    ref_demand = min(c for c, r in refs.items() if (r.get("samples_per_s") or 0) >= doc["target"] * best)
    rows = [{"cpus": p["cpus"], "num_workers": p["num_workers"], "lotus": p["samples_per_s"], "measured": p["measured"],
             "lotus_ci95": p.get("ci95"), "reference": refs[p["cpus"]].get("samples_per_s"),
             "reference_ci95": refs[p["cpus"]].get("ci95"),
             "error": err(p["samples_per_s"], refs[p["cpus"]].get("samples_per_s"))} for p in doc["matrix"]]
    errs = sorted(abs(r["error"]) for r in rows if r["error"] is not None)
    return {"lotus": doc, "rows": rows, "lotus_demand": doc["demand"], "reference_demand_cpus": ref_demand,
            "median_abs_error": errs[len(errs) // 2] if errs else None, "max_abs_error": errs[-1] if errs else None,
            "wall_s": wall}


def phase_tune(a) -> dict:
    out = Path(a.work) / f"tune-{a.arch}"
    rc, o, e, wall = lotus("tune", "--max-seconds", a.max_seconds, "--only", "num_workers",
                           "--max-workers", max(a.sweep), "--budget-minutes", a.tune_minutes, "--out", out,
                           "--json", "--",
                           *job(a, 4, 100000))
    if rc != 0:
        return {"error": e[-3000:], "wall_s": wall}
    doc = json.loads(o)
    chosen = doc["best"]["num_workers"]
    n = len(allowed())
    sweep = {w: reference(a, n, w, f"sweep-w{w}") for w in sorted({*a.sweep, chosen})}
    best_w = max(sweep, key=lambda w: sweep[w].get("samples_per_s") or 0)
    probe_walls = [p["wall_s"] for p in doc["probes"] if not p["failed"]]
    sweep_s = (sum(probe_walls) / len(probe_walls)) * (max(a.sweep) + 1) if probe_walls else None
    return {"lotus": doc, "sweep": sweep, "chosen_workers": chosen, "reference_best_workers": best_w,
            "chosen_vs_best": err(sweep[chosen].get("samples_per_s"), sweep[best_w].get("samples_per_s")),
            "tune_s": wall, "exhaustive_sweep_s_estimate": sweep_s,
            "time_share": wall / sweep_s if sweep_s else None,
            "predicted_vs_reference": err(doc.get("predicted_samples_per_s"), sweep[chosen].get("samples_per_s"))}


def phase_whatif(a) -> dict:
    """Fit on one traced run (the throughput phase's first) and predict the tune phase's reference sweep."""
    res = Path(a.out)
    tune = json.loads((res / f"{a.arch}-tune.json").read_text())
    trace = Path(a.work) / f"run-{a.arch}-w{a.throughput_workers[0]}"
    ws = sorted(int(w) for w in tune["sweep"])
    n = len(allowed())
    rc, o, e, _ = lotus("whatif", "--data-dir", trace, "--workers", ",".join(map(str, ws)), "--cpus", n, "--json")
    if rc != 0:
        return {"error": e[-3000:]}
    doc = json.loads(o)
    rows = []
    for p in doc["predictions"]:
        ref = tune["sweep"].get(str(p["num_workers"])) or tune["sweep"].get(p["num_workers"]) or {}
        rows.append({"workers": p["num_workers"], "lotus": p["samples_per_s"], "reference": ref.get("samples_per_s"),
                     "reference_ci95": ref.get("ci95"), "error": err(p["samples_per_s"], ref.get("samples_per_s"))})
    errs = sorted(abs(r["error"]) for r in rows if r["error"] is not None)
    return {"measured": doc.get("measured"), "rows": rows, "median_abs_error": errs[len(errs) // 2] if errs else None,
            "max_abs_error": errs[-1] if errs else None}


def phase_stalls(a) -> dict:
    out = Path(a.work) / f"stalls-{a.arch}"
    w = a.stalls_workers
    rc, o, e, wall = lotus("stalls", "--max-seconds", a.max_seconds, "--out", out, "--json",
                           *(["--data", a.data] if a.data else []), "--", *job(a, w, 100000))
    if rc != 0:
        return {"error": e[-3000:], "wall_s": wall}
    doc = json.loads(o)
    ref = reference(a, len(allowed()), w, f"stalls-w{w}")
    return {"lotus": doc, "reference": ref, "lotus_warm_stall_share": doc.get("warm_stall_share"),
            "reference_wait_share": ref.get("wait_share"),
            "points_apart": (doc["warm_stall_share"] - ref["wait_share"]) * 100
            if doc.get("warm_stall_share") is not None and ref.get("wait_share") is not None else None,
            "wall_s": wall}


PHASES = {"throughput": phase_throughput, "sens": phase_sens, "tune": phase_tune, "whatif": phase_whatif,
          "stalls": phase_stalls}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="ImageFolder of JPEGs")
    p.add_argument("--synthetic", type=float, default=None, help="CPU ms per sample instead of --data")
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/lotus-probe-validation")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--phases", default="throughput,sens,tune,whatif,stalls")
    p.add_argument("--cpus", default="1,2,4,8,12,16")
    p.add_argument("--sweep", default="4,8,12,15,20,24", help="worker counts of the reference sweep (all CPUs)")
    p.add_argument("--throughput-workers", default="15,24")
    p.add_argument("--stalls-workers", type=int, default=8)
    p.add_argument("--ref-seconds", type=float, default=20.0)
    p.add_argument("--max-probes", type=int, default=8)
    p.add_argument("--tune-minutes", type=float, default=8.0, help="lotus tune's --budget-minutes")
    p.add_argument("--max-seconds", type=float, default=45.0, help="lotus's probe cap (seconds of batches)")
    p.add_argument("job_args", nargs="*", help="more arguments for the reference job (after --)")
    a = p.parse_args(argv)
    a.cpus = [int(c) for c in a.cpus.split(",") if int(c) <= len(allowed())]
    a.sweep = [int(w) for w in a.sweep.split(",")]
    a.throughput_workers = [int(w) for w in a.throughput_workers.split(",")]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.work).mkdir(parents=True, exist_ok=True)
    for name in a.phases.split(","):
        dest = Path(a.out) / f"{a.arch}-{name}.json"
        if dest.exists():
            print(f"{name}: done before, skipped", flush=True)
            continue
        print(f"{name}...", flush=True)
        t0 = time.monotonic()
        try:
            doc = PHASES[name](a)
        except Exception as exc:  # one phase's failure must not cost the others
            doc = {"error": repr(exc)}
        doc["phase_s"] = time.monotonic() - t0
        dest.write_text(json.dumps(doc, indent=1, default=str))
        print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
