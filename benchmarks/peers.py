"""lotus next to the profilers a user would pick instead, on one input pipeline, in one run.

The pipeline (a child process, ``--child``): stock ``torch.utils.data.DataLoader``, num_workers=0, an
ImageFolder of generated JPEGs with deterministic transforms (decode, Resize(256), CenterCrop(224),
ToTensor, Normalize), batch 8; after a warm-up it times ``--batches`` batches itself (wall and this
thread's CPU), so start-up and the tools' own set-up and write-out do not count. Variants:

* ``none``: nothing attached (the reference)
* ``lotus``: ``lotus run`` (lotus's DataLoader patched in, tracing on)
* ``torch.profiler``: the loop inside ``torch.profiler.profile(activities=[CPU])``
* ``py-spy``: ``py-spy record`` (sampling, 100 Hz, from outside the process)
* ``viztracer``: ``viztracer`` (every Python call)
* ``scalene``: ``scalene run --cpu-only`` (sampling, CPU only)

Rounds alternate the order of the variants; the figure per variant is the median over rounds of its
loop time divided by the reference's in the same round. A tool that is not installed is skipped.

    python benchmarks/peers.py                 # ~5 min on 2 cores
    python benchmarks/peers.py --rounds 7 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def child(args) -> int:
    import torch
    import torchvision
    from torchvision import transforms as T

    torch.set_num_threads(1)
    ds = torchvision.datasets.ImageFolder(args.data, transform=T.Compose([
        T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]))
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=0)

    def loop():
        it = iter(loader)
        for _ in range(args.warmup):
            next(it)
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(args.batches):
            next(it)
        return time.perf_counter() - w0, time.thread_time() - c0

    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall, cpu = loop()
        prof.export_chrome_trace(os.path.join(args.out_dir, "torch_profiler.json"))
    else:
        wall, cpu = loop()
    Path(args.result).write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "loader": type(loader).__module__}))
    return 0


def variants(out: Path) -> dict[str, list[str] | None]:
    py = sys.executable
    lotus = [py, "-m", "lotus", "run", "--no-verdict", "-o", str(out / "lotus"), "--"]
    pyspy = shutil.which("py-spy") or str(Path(py).with_name("py-spy"))
    viz = shutil.which("viztracer") or str(Path(py).with_name("viztracer"))
    return {
        "none": [],
        "lotus": lotus,
        "torch.profiler": None,  # flag of the child
        "py-spy": [pyspy, "record", "-r", "100", "-o", str(out / "pyspy.svg"), "--"]
        if os.path.exists(pyspy) else False,
        "viztracer": [viz, "--quiet", "--output_file", str(out / "viztracer.json")] if os.path.exists(viz) else False,
        "scalene": [py, "-m", "scalene", "run", "--cpu-only", "-o", str(out / "scalene.json")]
        if _has("scalene") else False,
    }


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def run_variant(name: str, prefix, data: Path, out: Path, batches: int, warmup: int) -> dict | None:
    result = out / f"result-{name}.json"
    result.unlink(missing_ok=True)
    me = [str(HERE), "--child", "--data", str(data), "--result", str(result), "--out-dir", str(out),
          "--batches", str(batches), "--warmup", str(warmup)]
    if name == "torch.profiler":
        cmd = [sys.executable, *me, "--torch-profiler"]
    elif name == "viztracer":
        cmd = [*prefix, "--", *me]  # viztracer runs a script path itself
    elif name == "scalene":
        cmd = [*prefix, *me[:1], "---", *me[1:]]
    else:
        cmd = [*prefix, sys.executable, *me]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0 or not result.exists():
        print(f"  {name}: failed (exit {r.returncode}): {r.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads(result.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--torch-profiler", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--images", type=int, default=None, help="default: enough for warm-up + batches (one epoch)")
    p.add_argument("--only", default=None, help="comma-separated variants")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    with tempfile.TemporaryDirectory(prefix="lotus-peers-") as tmp:
        tmp = Path(tmp)
        images = max(args.images or 0, (args.warmup + args.batches) * 8)  # the timed loop stays in one epoch
        data = generate_image_folder(tmp / "data", DatasetSpec(images=images, seed=3))
        table = variants(tmp)
        names = [n for n, v in table.items() if v is not False and (args.only is None or n in args.only.split(",")
                                                                    or n == "none")]
        times: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[float]] = {n: [] for n in names}
        ratios: dict[str, list[float]] = {n: [] for n in names}
        t0 = time.perf_counter()
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            got = {}
            for n in order:
                res = run_variant(n, table[n], data, tmp, args.batches, args.warmup)
                if res is not None:
                    got[n] = res
                    times[n].append(res["wall_s"])
                    cpus[n].append(res["cpu_s"])
            if "none" in got:
                for n, res in got.items():
                    ratios[n].append(res["wall_s"] / got["none"]["wall_s"])
            print(f"round {r + 1}/{args.rounds} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    rows = {}
    print(f"\n{args.batches} batches of 8 JPEGs, num_workers=0, {args.rounds} rounds (median of per-round ratios)")
    print(f"{'variant':16s} {'loop s':>8s} {'slowdown':>10s}  range")
    for n in names:
        if not ratios[n]:
            continue
        med = statistics.median(ratios[n])
        rows[n] = {"median_loop_s": statistics.median(times[n]), "median_cpu_s": statistics.median(cpus[n]),
                   "median_ratio": med, "ratios": ratios[n]}
        print(f"{n:16s} {statistics.median(times[n]):8.3f} {med - 1:+10.1%}  "
              f"{min(ratios[n]) - 1:+.1%} .. {max(ratios[n]) - 1:+.1%}")
    if args.json:
        args.json.write_text(json.dumps({"batches": args.batches, "rounds": args.rounds,
                                         "python": sys.version.split()[0], "variants": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
