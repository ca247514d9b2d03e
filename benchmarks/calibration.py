"""Are lotus's 95% intervals calibrated? Repeats of known-cost jobs, each in its own process (issue 24, item 2).

Each job (benchmarks/reference_train.py --synthetic: plain torch, no lotus, timing its own steady state) runs
``--repeats`` times through lotus's launcher, the repeats of all jobs interleaved (round robin) so that the
machine's drift touches every job alike. For each job, over its repeats:

* coverage: the share of repeats whose interval holds the mean of the *other* repeats (target >= 90%);
* width ratio: the mean half-width of lotus's intervals over the repeats' empirical 95% half-width
  (``t975(n-1) x sd`` of the repeats' rates; target <= 2);
* bias: lotus's rate against the job's own clock, per repeat (median).

``--mode probe`` runs every repeat as a probe (``--steps``, ``--precision``, ``--max-seconds``: the probes'
default caps) and reports how each ended and how long it took; its intervals are scored against the mean of
the other repeats as above.

    python benchmarks/calibration.py --work /tmp/lotus-cal --repeats 8 --seconds 10 \
        --json docs/results/calibration_2cpu.json
    python benchmarks/calibration.py --work /tmp/lotus-cal --analyse-only      # re-read the traces (new estimator)

Traces are kept under ``--work/<mode>/<job>/r<k>``; a repeat whose directory holds a finished run is reused
(resume after an interruption; ``--analyse-only`` runs nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = str(ROOT / "benchmarks" / "reference_train.py")

# name -> reference_train.py arguments (known CPU cost per sample; -a none: a busy step of --step-ms)
JOBS = {
    # long epochs, 2 workers: the plain steady case
    "steady": ["--synthetic", "2", "-b", "16", "-j", "2", "--step-ms", "5", "--samples", "100000"],
    # epochs of 32 batches, 4 workers on 2 CPUs, fresh workers every epoch: restarts dominate
    "short-epochs": ["--synthetic", "1", "-b", "8", "-j", "4", "--step-ms", "2", "--samples", "256"],
    # the same with persistent workers
    "short-persistent": ["--synthetic", "1", "-b", "8", "-j", "4", "--step-ms", "2", "--samples", "256",
                         "--persistent-workers"],
    # num_workers=0: the main process prepares every batch
    "no-workers": ["--synthetic", "1", "-b", "16", "-j", "0", "--step-ms", "4", "--samples", "100000"],
    # heavy-tailed per-sample cost (log-normal, sigma 1)
    "jittery": ["--synthetic", "2", "-b", "8", "-j", "2", "--step-ms", "3", "--samples", "100000", "--jitter", "1"],
    # more workers than CPUs (8 on 2, persistent): the workers, time-sliced together, hand off in bursts
    "oversub": ["--synthetic", "4", "-b", "16", "-j", "8", "--step-ms", "1", "--samples", "100000",
                "--persistent-workers"],
    # light per-sample Python (tokenizer-like): per-batch overheads dominate
    "light": ["--synthetic", "0.05", "-b", "64", "-j", "1", "--step-ms", "1", "--samples", "100000"],
}


def run_repeat(job: str, k: int, a, mode: str) -> dict:
    from lotus.analysis.throughput import summarize_run
    from lotus.launch import LaunchOptions, launch

    trace = Path(a.work) / mode / job / f"r{k}"
    done = trace / "calibration.json"
    if done.exists():
        return json.loads(done.read_text())
    if a.analyse_only:
        return {}
    trace.mkdir(parents=True, exist_ok=True)
    own = trace / "own.json"
    cmd = [sys.executable, REF, *JOBS[job], "-a", "none", "--seconds", str(a.seconds), "--json", str(own)]
    opts = LaunchOptions(trace_dir=trace / "trace", capture=True, timeout_s=a.seconds * 6 + 60, cpus=a.cpu_list)
    if mode == "probe":
        cmd[cmd.index("--seconds") + 1] = str(max(a.seconds, a.max_seconds) * 4)
        opts.steps, opts.precision, opts.max_seconds = a.steps, a.precision, a.max_seconds
    t0 = time.monotonic()
    probe = launch(cmd, opts)
    doc = {"job": job, "repeat": k, "mode": mode, "exit_code": probe.exit_code, "wall_s": time.monotonic() - t0,
           "stopped_by": probe.stopped_by, "trace": str(trace / "trace")}
    try:
        doc["own"] = json.loads(own.read_text())
    except (OSError, ValueError):
        doc["own"] = None
    s = summarize_run(trace / "trace")
    doc["lotus"] = {k2: s.get(k2) for k2 in ("samples_per_s", "ci95", "steady_batches", "window_s", "note")}
    done.write_text(json.dumps(doc))
    return doc


def reanalyse(doc: dict) -> dict:
    """The lotus figures of a recorded repeat, read again with the current estimator."""
    from lotus.analysis.throughput import summarize_run

    s = summarize_run(doc["trace"])
    doc["lotus"] = {k: s.get(k) for k in ("samples_per_s", "ci95", "steady_batches", "window_s", "note")}
    return doc


def _own(run_dir) -> dict | None:
    """The job's own clock of a recorded run (``own.json`` in or beside it), if any."""
    for f in (Path(run_dir) / "own.json", Path(str(run_dir) + ".own.json")):
        if f.exists():
            return json.loads(f.read_text())
    return None


def score(docs: list[dict]) -> dict:
    """Coverage, width ratio and bias of one job's repeats."""
    ok = [d for d in docs if d.get("lotus") and d["lotus"].get("samples_per_s")]
    rates = [d["lotus"]["samples_per_s"] for d in ok]
    n = len(rates)
    out = {"repeats": n, "rates": rates}
    if n < 3:
        return {**out, "note": "fewer than 3 repeats with a rate"}
    from lotus.analysis.runspread import Reading, repeats

    r = repeats([Reading(str(i), d["lotus"]["samples_per_s"], d["lotus"].get("ci95")) for i, d in enumerate(ok)])
    mean, sd = r["mean_samples_per_s"], r["rel_sd"] * r["mean_samples_per_s"]
    emp_hw = r["rel_empirical_halfwidth"] * mean
    mean_hw = r["rel_mean_halfwidth"] * mean if r["rel_mean_halfwidth"] is not None else None
    bias = [d["lotus"]["samples_per_s"] / d["own"]["samples_per_s"] - 1 for d in ok
            if d.get("own") and d["own"].get("samples_per_s")]
    out.update(mean=mean, sd=sd, rel_sd=r["rel_sd"], empirical_hw=emp_hw, rel_empirical_hw=emp_hw / mean,
               coverage=r["coverage"], without_interval=n - r["with_interval"], mean_hw=mean_hw,
               rel_mean_hw=r["rel_mean_halfwidth"], width_ratio=r["width_ratio"],
               bias_median=statistics.median(bias) if bias else None,
               stopped_by=[d.get("stopped_by") for d in ok], wall_s=[round(d.get("wall_s", 0), 1) for d in ok])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/tmp/lotus-cal")
    p.add_argument("--jobs", default=",".join(JOBS))
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0, help="each repeat's steady seconds (run mode)")
    p.add_argument("--mode", choices=("run", "probe"), default="run")
    p.add_argument("--steps", type=int, default=600, help="probe mode: the steps cap")
    p.add_argument("--precision", type=float, default=0.03, help="probe mode: the precision target")
    p.add_argument("--max-seconds", type=float, default=90.0, help="probe mode: the time cap")
    p.add_argument("--analyse-only", action="store_true", help="run nothing: re-read the recorded traces")
    p.add_argument("--cpus", default=None, help="pin every job to these CPUs (e.g. 0-1: this 2-core VM's size)")
    p.add_argument("--score-traces", nargs="+", default=None, metavar="RUN_DIR",
                   help="run nothing: score these recorded runs as repeats of one configuration")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    from lotus.launch.options import parse_cpus

    if a.score_traces:
        from lotus.analysis.throughput import summarize_run

        docs_ = [{"lotus": summarize_run(d), "own": _own(d)} for d in a.score_traces]
        sc = score(docs_)
        print(json.dumps({k: v for k, v in sc.items() if k not in ("stopped_by", "wall_s")}, indent=1))
        if a.json:
            a.json.write_text(json.dumps({"traces": a.score_traces, "score": sc}, indent=1, default=str))
        return 0
    a.cpu_list = parse_cpus(a.cpus) if a.cpus else None
    jobs = [j for j in a.jobs.split(",") if j]
    bad = [j for j in jobs if j not in JOBS]
    if bad:
        p.error(f"unknown job(s) {bad}; known: {', '.join(JOBS)}")
    docs: dict[str, list[dict]] = {j: [] for j in jobs}
    for k in range(a.repeats):
        for j in jobs:
            d = run_repeat(j, k, a, a.mode)
            if not d:
                continue
            if a.analyse_only:
                d = reanalyse(d)
            docs[j].append(d)
            lo = d["lotus"]
            ci = lo.get("ci95")
            own = (d.get("own") or {}).get("samples_per_s")
            print(f"{j:17s} r{k}: lotus {lo.get('samples_per_s') or 0:9.1f} "
                  f"[{ci[0] if ci else 0:9.1f}, {ci[1] if ci else 0:9.1f}]  own {own or 0:9.1f}  "
                  f"{d.get('stopped_by') or ''} {d.get('wall_s', 0):.1f}s", flush=True)
    scores = {j: score(ds) for j, ds in docs.items()}
    print(f"\n{'job':17s} {'n':>2s} {'rate':>9s} {'rel sd':>7s} {'emp hw':>7s} {'lotus hw':>8s} {'ratio':>6s} "
          f"{'cover':>6s} {'bias':>6s}")
    for j, s in scores.items():
        if "mean" not in s:
            print(f"{j:17s} {s['repeats']:2d} {s.get('note')}")
            continue

        def pct(x):
            return "   -  " if x is None else f"{100 * x:5.1f}%"

        print(f"{j:17s} {s['repeats']:2d} {s['mean']:9.1f} {pct(s['rel_sd'])} {pct(s['rel_empirical_hw'])} "
              f"{pct(s['rel_mean_hw']):>8s} {s['width_ratio'] or math.nan:6.2f} {pct(s['coverage'])} "
              f"{pct(s['bias_median'])}")
    if a.json:
        args = {k: v for k, v in vars(a).items() if k != "cpu_list"} | {"json": str(a.json)}
        a.json.write_text(json.dumps({"args": args, "jobs": {j: JOBS[j] for j in jobs}, "scores": scores}, indent=1,
                                     default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
