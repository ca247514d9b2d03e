"""Validation of lotus.model on real processes: fit on two probes, predict a grid, measure every point.

The job (benchmarks/jobs/fixed_cost.py by default, or any ``-- COMMAND``) runs through lotus.launch
with CPU affinity and num_workers set per point. Two probes (all CPUs, and one CPU) fit the model;
every (CPUs, workers) point of the grid is then predicted and measured; the table gives the error of
each prediction. On the GPU machine run it with examples/train_imagenet.py (ResNet-18/50).

    python benchmarks/model_validation.py --json out.json            # ~4 min on 2 cores
    python benchmarks/model_validation.py --workers 0,1,2,4,8 --cpus 1,2,4,8,16 -- python examples/...
    python benchmarks/model_validation.py --workers match --cpus 1,2,4,8,12,16 --fit 16:4,2:1 \\
        --steps 40 --json r18.json -- python examples/train_imagenet.py DATA -a resnet18 -b 64 --amp
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpus", default=None, help="CPU counts (default 1..all)")
    p.add_argument("--workers", default="0,1,2,3",
                   help="worker counts of every CPU count, or 'match' (workers = CPUs at each point)")
    p.add_argument("--fit", default=None,
                   help="the fitting probes as CPUS:WORKERS pairs (default: all CPUs:1,1:1)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    import os

    from lotus.launch import LaunchOptions, launch
    from lotus.model import fit, load_run

    allowed = sorted(os.sched_getaffinity(0))
    cpus = [int(c) for c in args.cpus.split(",")] if args.cpus else list(range(1, len(allowed) + 1))
    match = args.workers == "match"
    workers = [] if match else [int(w) for w in args.workers.split(",")]
    fit_at = ([tuple(int(v) for v in pair.split(":")) for pair in args.fit.split(",")] if args.fit
              else [(max(cpus), 1), (min(cpus), 1)])
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    command = command or [sys.executable, str(HERE / "jobs" / "fixed_cost.py")]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lotus-model-val-") as tmp:
        def probe(c, w, tag):
            r = launch(command, LaunchOptions(trace_dir=Path(tmp) / f"{tag}-c{c}-w{w}", steps=args.steps,
                                              cpus=allowed[:c], workers=w, capture=True))
            if r.exit_code != 0:
                raise SystemExit(f"probe c{c} w{w} failed: {r.stderr_tail()[-500:]}")
            return r
        fit_probes = [probe(c, w, "fit") for c, w in fit_at]
        model = fit([load_run(pr.trace_dir) for pr in fit_probes])
        rows = []
        for c in cpus:
            for w in ([c] if match else workers):
                pred = model.predict(w, float(c))
                meas = probe(c, w, "point")
                err = None
                if pred.samples_per_s and meas.samples_per_s:
                    err = pred.samples_per_s / meas.samples_per_s - 1
                rows.append({"cpus": c, "workers": w, "predicted_samples_per_s": pred.samples_per_s,
                             "measured_samples_per_s": meas.samples_per_s, "error": err,
                             "bottleneck": pred.bottleneck})
                print(f"cpus {c:2d} workers {w:2d}: predicted {pred.samples_per_s or 0:8.1f}  measured "
                      f"{meas.samples_per_s or 0:8.1f}  error {'-' if err is None else f'{err:+.1%}'}  "
                      f"({pred.bottleneck})", flush=True)
                if args.json:  # after every point: a run cut short keeps what it measured
                    args.json.write_text(json.dumps({"partial": True, "command": command, "rows": rows}, indent=2))
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    summary = {"points": len(rows), "median_abs_error": statistics.median(errs) if errs else None,
               "max_abs_error": max(errs) if errs else None,
               "within_10pct": sum(e <= 0.10 for e in errs), "seconds": time.perf_counter() - t0,
               "fitted_on": [{"cpus": c, "workers": w} for c, w in fit_at],
               "contention": model.contention, "command": command, "rows": rows}
    print(f"median |error| {summary['median_abs_error']:.1%}, max {summary['max_abs_error']:.1%}, "
          f"{summary['within_10pct']}/{len(errs)} points within 10% ({summary['seconds']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
