"""Issues 10.4 and 24.4: apps of different CPU appetites sharing one host, concurrent, under three CPU policies.

The same three apps (the bundled trainer, examples/train_imagenet.py, on generated JPEG datasets; ``--mix``:
``gpu`` = a decode-bound, a mixed and a GPU-bound ResNet; ``starve`` = an app of small images whose main
process launches small steps fast beside two decode-bound apps, a mix built to need disjoint CPU sets;
``need`` = that app, two GPU-bound ResNet-152s of cheap decoding and a decode-bound hog; ``smoke`` = CPU-only
tiny apps) run side by side through ``lotus.submit`` (the library behind
``lotus submit``) three times:

* ``all``: every app takes every core (num_workers = CPUs - 1 each, no affinity): what users do;
* ``equal``: disjoint, equal, contiguous CPU sets (num_workers = set size - 1);
* ``auto``: ``workers=auto``: a short profiling probe per app, lotus.model's curves, disjoint CPU sets
  sized greedily by marginal throughput, then the side-by-side trials of those sets against sharing every
  core (``--trial-seconds`` each, lotus.submit.trial) and the better one (the probes' and trials' time is
  reported apart).

Every app runs for ``--seconds`` (a time limit, so that all three overlap for the whole window; the
apps' exit code is then 124 by design) and the figure is the throughput while all three ran: from
each app's trace, the samples its loop consumed between the latest first batch + ``--warmup`` seconds
and the earliest last batch, divided by that window (one monotonic clock for all processes).
Every rate has its 95% interval (per app the one steady-state measure over the common window, summed).
Targets (issues 10, 24): ``auto`` >= 1.15x the better of ``all`` and ``equal`` on a mix built to need it,
and never below ``all`` (letting every app use every core) on any mix.

    python benchmarks/submit_validation.py --out res/ --data /tmp/jpegs --generate 6000 --mix starve   # GPU host
    python benchmarks/submit_validation.py --out /tmp/sv --mix smoke --seconds 30 --trial-seconds 12   # CPU

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
TRAINER = REPO / "examples" / "train_imagenet.py"
COLUMNS = ["name", "command", "workers", "output_folder", "cuda_device", "cpus", "steps", "timeout_s"]
# name, dataset ("big": JPEGs of ~400x500, "small": 64-80 px), model, batch, trainer args
GPU_APPS = [("r18-decode", "big", "resnet18", 256, "--amp --channels-last --epochs 1000"),
            ("r50-mixed", "big", "resnet50", 128, "--amp --channels-last --epochs 1000"),
            ("r152-gpu", "big", "resnet152", 64, "--amp --channels-last --epochs 1000")]
# a mix built to need disjoint sets: an app whose main process launches small steps fast (small images,
# cheap decoding: it needs its main process's CPU and a few workers) beside two decode-bound apps whose
# workers take every core they are given (torchloader's and Synergy's case)
# a mix built so that neither baseline fits: the small-image app above (starved under all), two GPU-bound
# ResNet-152s on small images (cheap decoding: under equal sets most of their CPUs idle) and a decode-bound hog
NEED_APPS = [("r18-small", "small", "resnet18", 64, "--amp --channels-last --image-size 64 --epochs 1000"),
             ("r152-gpu-a", "small", "resnet152", 64, "--amp --channels-last --epochs 1000"),
             ("r152-gpu-b", "small", "resnet152", 64, "--amp --channels-last --epochs 1000"),
             ("r18-hog", "big", "resnet18", 256, "--amp --channels-last --epochs 1000")]
STARVE_APPS = [("r18-small", "small", "resnet18", 64, "--amp --channels-last --image-size 64 --epochs 1000"),
               ("r18-hog-a", "big", "resnet18", 256, "--amp --channels-last --epochs 1000"),
               ("r18-hog-b", "big", "resnet18", 256, "--amp --channels-last --epochs 1000")]
SMOKE_APPS = [("tiny-a", "big", "resnet18", 16, "--device cpu --image-size 32 --epochs 1000"),
              ("tiny-b", "small", "resnet34", 4, "--device cpu --image-size 64 --epochs 1000")]
MIXES = {"gpu": GPU_APPS, "starve": STARVE_APPS, "need": NEED_APPS, "smoke": SMOKE_APPS}


def _cpu_sets(pool: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(pool), n)
    out, i = [], 0
    for k in range(n):
        m = size + (k < extra)
        out.append(pool[i:i + m])
        i += m
    return out


def write_csv(path: Path, apps, policy: str, pool: list[int], seconds: float, cuda: str, data: dict) -> None:
    import shlex

    from lotus.launch.options import format_cpus

    sets = _cpu_sets(pool, len(apps))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for (name, ds, model, batch, args), cpus in zip(apps, sets, strict=True):
            if policy == "all":
                workers, cpu_text = str(max(1, len(pool) - 1)), ""
            elif policy == "equal":
                workers, cpu_text = str(max(1, len(cpus) - 1)), format_cpus(cpus)
            else:
                workers, cpu_text = "auto", ""
            cmd = shlex.join([sys.executable, str(TRAINER), str(data[ds]), "-a", model, "-b", str(batch),
                              *args.split()])
            w.writerow([name, cmd, workers, policy, cuda, cpu_text, 10 ** 7, seconds])


def window_rates(trace_dirs: dict[str, str], warmup_s: float, workers: dict | None = None) -> dict:
    """samples/s of every app while all of them ran (after ``warmup_s`` of the latest start), with 95%
    intervals: lotus.submit.trial's measure (the one steady-state measure per app, summed)."""
    from lotus.submit.trial import window_rates as measure

    r = measure(trace_dirs, warmup_s, workers=workers)
    if r.error:
        return {"error": r.error}
    return {"window_s": r.window_s, "samples_per_s": {n: a["samples_per_s"] for n, a in r.apps.items()},
            "ci95": {n: a["ci95"] for n, a in r.apps.items()}, "total_samples_per_s": r.samples_per_s,
            "total_ci95": list(r.ci95) if r.ci95 else None}


def run_policy(policy: str, args, apps, pool: list[int]) -> dict:
    import shutil

    from lotus.submit.apps import read_apps
    from lotus.submit.dispatch import submit
    from lotus.submit.local import LocalExecutor
    from lotus.submit.plan import PlanOptions

    out_dir = args.work / f"submit-{policy.replace('#', '-')}"
    shutil.rmtree(out_dir, ignore_errors=True)  # an earlier run's traces there would join this run's window
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = policy.split("#", maxsplit=1)[0]  # all#2: a repeat of all
    csv_path = out_dir / "apps.csv"
    write_csv(csv_path, apps, policy, pool, args.seconds, args.cuda_device, {"big": args.data, "small": args.small})
    opts = PlanOptions(out_dir=out_dir, concurrent=True, data_dir=args.data, probe_steps=args.probe_steps,
                       probe_max_seconds=args.probe_max_seconds,
                       cpus=pool, trial_s=args.trial_seconds if policy == "auto" else 0.0)
    t0 = time.perf_counter()
    result = submit(read_apps(csv_path), opts, LocalExecutor(), report=False)
    wall = time.perf_counter() - t0
    probe_s = sum(p.get("wall_s") or 0 for p in result.probes)
    plan = {p.name: {"cpus": len(p.cpus) if p.cpus else None, "workers": p.workers, "source": p.cpus_source}
            for p in result.plan.apps}
    window = window_rates({p.name: str(p.trace_dir) for p in result.plan.apps}, args.warmup,
                          {p.name: p.workers or 0 for p in result.plan.apps})
    apps_out = [r.to_dict() for r in result.results]
    trial_s = sum((result.trial or {}).get(k, {}).get("window_s", 0) for k in ("disjoint", "shared", "refined"))
    return {"policy": policy, "plan": plan, "window": window, "apps": apps_out, "probes": result.probes,
            "probe_s": probe_s, "trial": result.trial, "trial_window_s": trial_s, "wall_s": wall}


def tables(res: dict) -> list[str]:
    pols = sorted(res["policies"], key=lambda p: (("all", "equal", "auto").index(p.split("#")[0]), p))
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
        tot, ci = w.get("total_samples_per_s"), w.get("total_ci95")
        total = "-" if tot is None else f"{tot:,.0f}" + (f" ({ci[0]:,.0f}-{ci[1]:,.0f})" if ci else " (no interval)")
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {total} |")
    s = res.get("summary") or {}
    if s.get("auto_over_best_baseline") is not None:
        lines += ["", f"auto / best baseline ({s['best_baseline']}): {s['auto_over_best_baseline']:.3f}x "
                      f"(target >= 1.15x on a mix that needs it, never below all); auto's profiling probes "
                      f"took {s['auto_probe_s']:.0f} s"]
        t = (res["policies"].get("auto") or {}).get("trial")
        if t:
            lines += [f"auto's trials ({t['seconds']:g} s each): {t['why']}; chosen: {t['chosen']}"]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "lotus-submit-validation")
    p.add_argument("--data", type=Path, default=None, help="ImageFolder (default WORK/data)")
    p.add_argument("--small", type=Path, default=None, help="ImageFolder of small images (default WORK/small)")
    p.add_argument("--generate", type=int, default=None, help="first generate N JPEGs into --data (and --small)")
    p.add_argument("--mix", choices=sorted(MIXES), default="gpu")
    p.add_argument("--trial-seconds", type=float, default=45.0, help="auto: each side-by-side trial")
    p.add_argument("--seconds", type=float, default=75.0, help="each app's run (time limit)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds after the latest start not counted")
    p.add_argument("--probe-steps", type=int, default=30)
    p.add_argument("--probe-max-seconds", type=float, default=90.0)
    p.add_argument("--policies", default="all,equal,auto", help="comma-separated; all#2: a second run of all")
    p.add_argument("--cpus", default=None, help="CPU pool (default: this process's affinity)")
    p.add_argument("--cuda-device", default="", help="CUDA_VISIBLE_DEVICES of every app (default inherited)")
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from lotus.launch.options import parse_cpus

    args.data = args.data or args.work / "data"
    args.small = args.small or args.work / "small"
    pool = parse_cpus(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
    apps = MIXES[args.mix]
    if args.generate:
        from lotus.demo.dataset import DatasetSpec, generate_image_folder

        for d, spec in ((args.data, DatasetSpec(images=args.generate)),
                        (args.small, DatasetSpec(images=args.generate, min_short_px=64, max_short_px=80))):
            if not (d.is_dir() and any(d.iterdir())) and any(a[1] == ("big" if d == args.data else "small")
                                                             for a in apps):
                generate_image_folder(d, spec, workers=min(16, len(pool)))
    args.out.mkdir(parents=True, exist_ok=True)
    out_json = args.out / "submit_validation.json"
    res = json.loads(out_json.read_text()) if args.resume and out_json.is_file() else {}
    res.setdefault("policies", {})
    res.update({"mix": args.mix, "apps": [list(a) for a in apps], "cpus": len(pool), "seconds": args.seconds,
                "warmup_s": args.warmup,
                "command": " ".join(["python", "benchmarks/submit_validation.py", *(argv or sys.argv[1:])])})
    for policy in args.policies.split(","):
        if policy in res["policies"]:
            continue
        print(f"== {policy}", flush=True)
        res["policies"][policy] = run_policy(policy, args, apps, pool)
        print(json.dumps(res["policies"][policy]["window"]), flush=True)
        out_json.write_text(json.dumps(res, indent=2, default=str))
    tot = {p: (r["window"].get("total_samples_per_s") or 0.0) for p, r in res["policies"].items()}
    # a policy run more than once (all, all#2): the mean of its runs
    runs = {}
    for p, v in tot.items():
        runs.setdefault(p.split("#")[0], []).append(v)
    base = {p: sum(v) / len(v) for p, v in runs.items() if p in ("all", "equal")}
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
