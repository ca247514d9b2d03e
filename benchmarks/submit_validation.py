"""Issue 10.4: apps of different CPU appetites sharing one host, concurrent, under three CPU policies.

The same three apps (rows of the bundled trainer, examples/train_imagenet.py, on one generated JPEG
dataset) run side by side through ``lotus.submit`` (the library behind ``lotus submit``) three times:

* ``all``: every app takes every core (num_workers = CPUs - 1 each, no affinity): what users do;
* ``equal``: disjoint, equal, contiguous CPU sets (num_workers = set size - 1);
* ``auto``: ``workers=auto``: a short profiling probe per app, lotus.model's curves, disjoint CPU sets
  sized greedily by marginal throughput (the probes' time is reported apart).

Every app runs for ``--seconds`` (a time limit, so that all three overlap for the whole window; the
apps' exit code is then 124 by design) and the figure is the throughput while all three ran: from
each app's trace, the samples its loop consumed between the latest first batch + ``--warmup`` seconds
and the earliest last batch, divided by that window (one monotonic clock for all processes).
Target (issue 10): total samples/s of ``auto`` >= 1.15x the better of ``all`` and ``equal``.

    python benchmarks/submit_validation.py --out res/ --data /tmp/jpegs --generate 6000      # GPU host
    python benchmarks/submit_validation.py --out /tmp/sv --smoke                              # CPU, ~3 min

Written under ``--out``: submit_validation.json (rewritten after every policy; ``--resume`` keeps the
policies already there) and submit_validation.md (the tables).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ["name", "arch", "depth", "batch", "workers", "output_folder", "port", "submit_interval", "cuda_device",
           "cpus", "args", "steps", "timeout_s"]
# name, arch, depth, batch, trainer args: decoding-bound (small net, big batch), mixed, GPU-bound (big net)
GPU_APPS = [("r18-decode", "resnet", "18", 256, "--amp --channels-last --epochs 1000"),
            ("r50-mixed", "resnet", "50", 128, "--amp --channels-last --epochs 1000"),
            ("r152-gpu", "resnet", "152", 64, "--amp --channels-last --epochs 1000")]
SMOKE_APPS = [("tiny-a", "resnet", "18", 16, "--device cpu --image-size 32 --epochs 1000"),
              ("tiny-b", "resnet", "34", 4, "--device cpu --image-size 64 --epochs 1000")]


def _cpu_sets(pool: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(pool), n)
    out, i = [], 0
    for k in range(n):
        m = size + (k < extra)
        out.append(pool[i:i + m])
        i += m
    return out


def write_csv(path: Path, apps, policy: str, pool: list[int], seconds: float, cuda: str) -> None:
    from lotus.launch.options import format_cpus

    sets = _cpu_sets(pool, len(apps))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for (name, arch, depth, batch, args), cpus in zip(apps, sets, strict=True):
            if policy == "all":
                workers, cpu_text = str(max(1, len(pool) - 1)), ""
            elif policy == "equal":
                workers, cpu_text = str(max(1, len(cpus) - 1)), format_cpus(cpus)
            else:
                workers, cpu_text = "auto", ""
            w.writerow([name, arch, depth, batch, workers, policy, "", 0, cuda, cpu_text, args, 10 ** 7, seconds])


def window_rates(trace_dirs: dict[str, str], warmup_s: float) -> dict:
    """samples/s of every app while all of them ran (after ``warmup_s`` of the latest start)."""
    from lotus.query.batches import consumed_only, load_batches

    frames = {}
    for name, d in trace_dirs.items():
        try:
            b = consumed_only(load_batches(d))
        except Exception as exc:  # an app without a trace: no common window
            return {"error": f"{name}: {exc}"}
        if b.empty:
            return {"error": f"{name}: no consumed batch"}
        frames[name] = b
    t0 = max(float(b["consumed_ns"].min()) for b in frames.values()) + warmup_s * 1e9
    t1 = min(float(b["consumed_ns"].max()) for b in frames.values())
    if t1 <= t0:
        return {"error": f"no common window after {warmup_s} s of warm-up"}
    rates = {}
    for name, b in frames.items():
        t = b["consumed_ns"].astype("float64")
        inside = b[(t > t0) & (t <= t1)]
        rates[name] = float(inside["n_samples"].astype("float64").sum()) / ((t1 - t0) / 1e9)
    return {"window_s": (t1 - t0) / 1e9, "samples_per_s": rates, "total_samples_per_s": sum(rates.values())}


def run_policy(policy: str, args, apps, pool: list[int]) -> dict:
    from lotus.submit.apps import read_apps
    from lotus.submit.dispatch import submit
    from lotus.submit.local import LocalExecutor
    from lotus.submit.plan import PlanOptions

    out_dir = args.work / f"submit-{policy}"
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "apps.csv"
    write_csv(csv_path, apps, policy, pool, args.seconds, args.cuda_device)
    opts = PlanOptions(out_dir=out_dir, concurrent=True, data_dir=args.data, probe_steps=args.probe_steps,
                       cpus=pool)
    t0 = time.perf_counter()
    result = submit(read_apps(csv_path), opts, LocalExecutor(), report=False)
    wall = time.perf_counter() - t0
    probe_s = sum(p.get("wall_s") or 0 for p in result.probes)
    plan = {p.name: {"cpus": len(p.cpus) if p.cpus else None, "workers": p.workers, "source": p.cpus_source}
            for p in result.plan.apps}
    window = window_rates({p.name: str(p.trace_dir) for p in result.plan.apps}, args.warmup)
    apps_out = [r.to_dict() for r in result.results]
    return {"policy": policy, "plan": plan, "window": window, "apps": apps_out, "probes": result.probes,
            "probe_s": probe_s, "wall_s": wall}


def tables(res: dict) -> list[str]:
    pols = [p for p in ("all", "equal", "auto") if p in res["policies"]]
    names = []
    for p in pols:
        for n in res["policies"][p]["plan"]:
            if n not in names:
                names.append(n)
    lines = ["| policy | " + " | ".join(f"{n} CPUs/workers | {n} samples/s" for n in names) + " | total samples/s |",
             "|---|" + "---|---|" * len(names) + "---|"]
    for p in pols:
        r = res["policies"][p]
        w = r["window"]
        cells = []
        for n in names:
            pl = r["plan"].get(n, {})
            cells.append(f"{pl.get('cpus') or 'all'}/{pl.get('workers')}")
            rate = (w.get("samples_per_s") or {}).get(n)
            cells.append("-" if rate is None else f"{rate:,.0f}")
        tot = w.get("total_samples_per_s")
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {'-' if tot is None else f'{tot:,.0f}'} |")
    s = res.get("summary") or {}
    if s.get("auto_over_best_baseline") is not None:
        lines += ["", f"auto / best baseline ({s['best_baseline']}): {s['auto_over_best_baseline']:.3f}x "
                      f"(target >= 1.15x); auto's profiling probes took {s['auto_probe_s']:.0f} s"]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "lotus-submit-validation")
    p.add_argument("--data", type=Path, default=None, help="ImageFolder (default WORK/data)")
    p.add_argument("--generate", type=int, default=None, help="first generate N JPEGs into --data")
    p.add_argument("--seconds", type=float, default=75.0, help="each app's run (time limit)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds after the latest start not counted")
    p.add_argument("--probe-steps", type=int, default=30)
    p.add_argument("--policies", default="all,equal,auto")
    p.add_argument("--cpus", default=None, help="CPU pool (default: this process's affinity)")
    p.add_argument("--cuda-device", default="", help="CUDA_VISIBLE_DEVICES of every app (default inherited)")
    p.add_argument("--smoke", action="store_true", help="CPU-only tiny apps (tests the plumbing)")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from lotus.launch.options import parse_cpus

    args.data = args.data or args.work / "data"
    pool = parse_cpus(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
    apps = SMOKE_APPS if args.smoke else GPU_APPS
    if args.generate and not (args.data.is_dir() and any(args.data.iterdir())):
        from lotus.demo.dataset import DatasetSpec, generate_image_folder

        generate_image_folder(args.data, DatasetSpec(images=args.generate), workers=min(16, len(pool)))
    args.out.mkdir(parents=True, exist_ok=True)
    out_json = args.out / "submit_validation.json"
    res = json.loads(out_json.read_text()) if args.resume and out_json.is_file() else {}
    res.setdefault("policies", {})
    res.update({"apps": [list(a) for a in apps], "cpus": len(pool), "seconds": args.seconds, "warmup_s": args.warmup,
                "command": " ".join(["python", "benchmarks/submit_validation.py", *(argv or sys.argv[1:])])})
    for policy in args.policies.split(","):
        if policy in res["policies"]:
            continue
        print(f"== {policy}", flush=True)
        res["policies"][policy] = run_policy(policy, args, apps, pool)
        print(json.dumps(res["policies"][policy]["window"]), flush=True)
        out_json.write_text(json.dumps(res, indent=2, default=str))
    tot = {p: (r["window"].get("total_samples_per_s") or 0.0) for p, r in res["policies"].items()}
    base = {p: v for p, v in tot.items() if p in ("all", "equal")}
    if "auto" in tot and base and max(base.values()) > 0:
        best = max(base, key=base.get)
        res["summary"] = {"best_baseline": best, "auto_over_best_baseline": tot["auto"] / base[best],
                          "auto_probe_s": res["policies"]["auto"]["probe_s"], "totals": tot}
    out_json.write_text(json.dumps(res, indent=2, default=str))
    lines = tables(res)
    (args.out / "submit_validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
