"""Same-run comparison: ``lotus tune`` vs an exhaustive sweep vs a restart-and-measure hill climb.

Three ways to pick num_workers for one job, interleaved in one run (round r runs the methods in an order
rotated by r, so that drifts of the machine's load hit them alike), every probe through lotus.launch
with the same ``--steps``:

* sweep: every worker count 0..max, one probe each; its best is the reference;
* climb (torchloader's way): start at the job's own setting, step +1 while samples/s improves (then -1
  if the first step up did not), restarting the job for every step;
* tune: ``lotus.tune.tune`` (the model proposes, probes verify), num_workers only by default (the
  search space of the other two; ``--all-settings`` tunes the rest too).

samples/s is tune's measure (lotus.analysis.throughput, skip="ramp"): the batches after the ramp
(num_workers x prefetch_factor), epoch starts included; every probe runs ``--steps`` batches after it.
Each reports the best samples/s it found (its own probe), its worker count, probes and seconds spent;
the chosen count's rate in the same round's sweep ("at sweep") says how good the choice is on one
scale. Target (issue 10, GPU machine): tune within 5 % of the sweep's best in <= 40 % of its time.
Results go to ``--out`` (JSON, rewritten after every method so that ``--resume`` continues a run cut
short, e.g. by a 10-minute limit per command) and a table on stdout.

    python benchmarks/tune.py --case cpu --rounds 3 --out /tmp/tune-bench.json          # this VM, ~5 min
    python benchmarks/tune.py --case gpu-cpu-bound --data /tmp/jpegs --generate 4000 --out tune-gpu.json
    python benchmarks/tune.py --case gpu-gpu-bound --data /tmp/jpegs --out tune-gpu.json --resume

Cases: ``cpu`` (tests/profile/jobs/folder_train.py over 1024 generated JPEGs, batch 8, 5 ms steps, 1 worker),
``cpu-imagenet`` (examples/train_imagenet.py, ResNet-18 at 64 px on CPU), ``gpu-cpu-bound``
(ResNet-18, batch 256, 4 workers, CUDA: JPEG decoding limits), ``gpu-gpu-bound`` (ResNet-50, batch 128,
4 workers, CUDA: the GPU limits).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("tune", "sweep", "climb")


def command(case: str, data: Path) -> list[str]:
    py = sys.executable
    if case == "cpu":
        return [py, str(ROOT / "tests/profile/jobs/folder_train.py"), str(data), "--step-ms", "5", "--workers", "1"]
    train = [py, str(ROOT / "examples/train_imagenet.py"), str(data), "--epochs", "1000", "--print-freq", "0"]
    if case == "cpu-imagenet":
        return [*train, "-a", "resnet18", "-b", "16", "-j", "1", "--image-size", "64", "--device", "cpu"]
    if case == "gpu-cpu-bound":
        return [*train, "-a", "resnet18", "-b", "256", "-j", "4", "--device", "cuda"]
    if case == "gpu-gpu-bound":
        return [*train, "-a", "resnet50", "-b", "128", "-j", "4", "--device", "cuda"]
    raise SystemExit(f"unknown case {case!r}")


class Prober:
    """One probe per call, each into its own trace directory; counts probes and keeps (workers, rate)."""

    def __init__(self, cmd: list[str], out: Path, steps: int, cpus: list[int] | None):
        self.cmd, self.out, self.steps, self.cpus = cmd, out, steps, cpus
        self.log: list[dict] = []

    def __call__(self, workers: int | None) -> tuple[int | None, float | None]:
        from lotus.launch import LaunchOptions, launch
        from lotus.tune.tuner import measurement_of, probe_steps
        from lotus.tune.types import LoaderSettings

        name = f"p{len(self.log):02d}-w{'own' if workers is None else workers}"
        settings = LoaderSettings(num_workers=workers)
        steps = probe_steps(self.steps, settings)  # as tune's probes: `steps` batches after the ramp
        p = launch(self.cmd, LaunchOptions(trace_dir=self.out / name, steps=steps, workers=workers,
                                           cpus=self.cpus, capture=True))
        m = measurement_of(p, settings, steps)
        w = m.effective.num_workers if m.effective is not None else workers
        rate = m.samples_per_s if m.ok else None
        self.log.append({"workers": w, "samples_per_s": rate, "wall_s": p.wall_s, "exit_code": p.exit_code})
        return w, rate


def sweep(prober: Prober, max_w: int) -> dict:
    rates = {w: prober(w)[1] for w in range(max_w + 1)}
    ok = {w: r for w, r in rates.items() if r}
    best = max(ok, key=ok.get)
    return {"best_workers": best, "samples_per_s": ok[best], "rates": ok}


def climb(prober: Prober, max_w: int) -> dict:
    w0, r0 = prober(None)
    best_w, best = w0, r0 or 0.0
    for direction in (+1, -1):
        w, moved = w0 + direction, False
        while 0 <= w <= max_w:
            _, r = prober(w)
            if not r or r <= best:
                break
            best_w, best, moved = w, r, True
            w += direction
        if moved:
            break  # improved going up: no need to go down
    return {"best_workers": best_w, "samples_per_s": best}


def tune_method(cmd, out: Path, steps: int, max_w: int, cpus, all_settings: bool) -> dict:
    from lotus.tune import tune

    r = tune(cmd, out=out, steps=steps, cpus=cpus, max_workers=max_w, budget_minutes=None, max_probes=64,
             only=None if all_settings else ("num_workers",))
    return {"best_workers": r.best.num_workers, "samples_per_s": r.samples_per_s, "best": r.best.to_dict(),
            "stopped": r.stopped, "probes_detail": [p.to_dict() for p in r.probes],
            "n_probes": len(r.probes), "baseline_samples_per_s": r.baseline_samples_per_s}


def run_method(method: str, cmd, out: Path, a, max_w: int) -> dict:
    t0 = time.monotonic()
    prober = Prober(cmd, out, a.steps, a.cpus)
    if method == "sweep":
        res = sweep(prober, max_w)
    elif method == "climb":
        res = climb(prober, max_w)
    else:
        res = tune_method(cmd, out, a.steps, max_w, a.cpus, a.all_settings)
    res["seconds"] = time.monotonic() - t0
    res.setdefault("n_probes", len(prober.log))
    res["probes"] = prober.log
    return res


def summarize(doc: dict) -> list[dict]:
    rows = []
    for rnd in doc["rounds"]:
        sw = rnd.get("sweep")
        for m in METHODS:
            res = rnd.get(m)
            if res is None:
                continue
            row = {"round": rnd["round"], "method": m, "best_workers": res["best_workers"],
                   "samples_per_s": res["samples_per_s"], "probes": res["n_probes"], "seconds": res["seconds"]}
            if sw:
                ref = sw["samples_per_s"]
                at = sw["rates"].get(str(res["best_workers"])) or sw["rates"].get(res["best_workers"])
                row.update(vs_sweep_best=res["samples_per_s"] / ref, at_sweep=(at / ref) if at else None,
                           time_vs_sweep=res["seconds"] / sw["seconds"])
            rows.append(row)
    return rows


def _fmt(v, f):
    return "-" if v is None else f.format(v)


def print_table(doc: dict, rows: list[dict]) -> None:
    job = " ".join(doc["command"][1:3])
    print(f"case {doc['case']}: {job} ... on {doc['cpus']} CPUs, workers 0..{doc['max_workers']}, "
          f"{doc['steps']} steps per probe")
    print(f"{'round':>5} {'method':<6} {'workers':>7} {'samples/s':>10} {'vs sweep best':>13} {'at sweep':>9} "
          f"{'probes':>6} {'seconds':>8} {'time vs sweep':>13}")
    for r in rows:
        print(f"{r['round']:>5} {r['method']:<6} {r['best_workers']:>7} {_fmt(r['samples_per_s'], '{:,.1f}'):>10} "
              f"{_fmt(r.get('vs_sweep_best'), '{:.1%}'):>13} {_fmt(r.get('at_sweep'), '{:.1%}'):>9} {r['probes']:>6} "
              f"{r['seconds']:>8.1f} {_fmt(r.get('time_vs_sweep'), '{:.0%}'):>13}")
    for m in METHODS:
        mine = [r for r in rows if r["method"] == m and r.get("vs_sweep_best") is not None]
        if mine and m != "sweep":
            print(f"median {m}: {statistics.median(r['vs_sweep_best'] for r in mine):.1%} of the sweep's best, "
                  f"{statistics.median(r['time_vs_sweep'] for r in mine):.0%} of its time "
                  f"(choice at sweep scale {statistics.median(r['at_sweep'] or 0 for r in mine):.1%})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="cpu", choices=("cpu", "cpu-imagenet", "gpu-cpu-bound", "gpu-gpu-bound"))
    p.add_argument("--data", type=Path, default=None, help="ImageFolder root (default $TMPDIR/lotus-tune-bench-N)")
    p.add_argument("--generate", type=int, default=None,
                   help="JPEGs to generate into --data (default 1024 for cpu: 128 batches per epoch)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--max-workers", type=int, default=None, help="default 2x the CPUs")
    p.add_argument("--cpus", default=None, help="CPU list for every probe (e.g. 0-15)")
    p.add_argument("--all-settings", action="store_true", help="tune prefetch/pin/persistent too")
    p.add_argument("--out", type=Path, default=Path("tune-bench.json"))
    p.add_argument("--traces", type=Path, default=None, help="where probes' traces go (default next to --out)")
    p.add_argument("--resume", action="store_true", help="keep the rounds/methods already in --out")
    a = p.parse_args(argv)
    from lotus.demo.dataset import DatasetSpec, generate_image_folder
    from lotus.launch.options import parse_cpus
    from lotus.tune.tuner import allowed_cpus

    a.cpus = parse_cpus(a.cpus) if a.cpus else None
    n = a.generate if a.generate is not None else (1024 if a.case == "cpu" else 0)
    if a.data is None:
        a.data = Path(os.environ.get("TMPDIR", "/tmp")) / f"lotus-tune-bench-{n or 'data'}"
    if n:
        generate_image_folder(a.data, DatasetSpec(images=n, seed=4), workers=min(os.cpu_count() or 1, 16))
    cmd = command(a.case, a.data)
    n_cpus = len(a.cpus) if a.cpus else len(allowed_cpus())
    max_w = a.max_workers if a.max_workers is not None else 2 * n_cpus
    traces = a.traces or a.out.with_suffix("").with_name(a.out.stem + "-traces")
    doc = {"case": a.case, "command": cmd, "cpus": n_cpus, "max_workers": max_w, "steps": a.steps,
           "load_average": os.getloadavg(), "rounds": []}
    if a.resume and a.out.exists():
        old = json.loads(a.out.read_text())
        if old.get("case") == a.case:
            doc["rounds"] = old["rounds"]
    for rnd in range(a.rounds):
        entry = next((r for r in doc["rounds"] if r["round"] == rnd), None)
        if entry is None:
            entry = {"round": rnd}
            doc["rounds"].append(entry)
        order = METHODS[rnd % 3:] + METHODS[:rnd % 3]
        for m in order:
            if m in entry:
                continue
            print(f"round {rnd}: {m}...", file=sys.stderr, flush=True)
            entry[m] = run_method(m, cmd, traces / f"r{rnd}-{m}", a, max_w)
            if m == "sweep":
                entry[m]["rates"] = {str(k): v for k, v in entry[m]["rates"].items()}
            a.out.write_text(json.dumps(doc, indent=1))
    doc["summary"] = summarize(doc)
    doc["load_average_end"] = os.getloadavg()
    a.out.write_text(json.dumps(doc, indent=1))
    print_table(doc, doc["summary"])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
