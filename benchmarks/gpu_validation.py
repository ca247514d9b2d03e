"""GPU validation of lotus (issue 5): data-attributed GPU idle vs torch.profiler, tracing overhead, DDP.

Runs examples/train_imagenet.py on a generated JPEG dataset and analyses each run with lotus:

    python benchmarks/gpu_validation.py sweep --out RESULTS --work /tmp/lv --archs resnet18 resnet50 \\
        --workers 1 2 4 8
    python benchmarks/gpu_validation.py overhead --out RESULTS --work /tmp/lv --workers 4 8
    python benchmarks/gpu_validation.py ddp --out RESULTS --work /tmp/lv --gpus 2

Each phase writes RESULTS/<phase>.json (everything measured) and RESULTS/<phase>.md (the tables).
``sweep`` profiles a window of steps with torch.profiler (Kineto) and compares, batch by batch, the GPU
idle lotus's CUDA events attribute to waiting for data with the GPU idle the profiler shows during
the same waits (no kernel, memcpy or memset running).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "train_imagenet.py"


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("LOTUS_TRACE_DIR", None)
    return env


def run_example(args: list[str], log: Path, torchrun: int = 0, timeout: int = 900) -> dict:
    cmd = ([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={torchrun}"] if torchrun
           else [sys.executable]) + [str(EXAMPLE), *args]
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, env=_env(), timeout=timeout,
                              check=False)
    wall = time.perf_counter() - t0
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {"cmd": " ".join(cmd[1:]), "rc": proc.returncode, "wall_s": round(wall, 2), "results": results}


def analyse(trace_dir: Path) -> dict:
    from lotus.analysis.chrome import read_kineto
    from lotus.analysis.diagnosis import verdict
    from lotus.analysis.gpu import gpu_report, kineto_gpu_busy
    from lotus.analysis.runs import load_config

    cfg = load_config(trace_dir)
    kineto = {}
    for p in cfg.kineto:
        busy = kineto_gpu_busy(read_kineto(p), p.name)
        if busy.events:
            kineto[busy.rank] = busy
    out = {"gpu": gpu_report(cfg.events, cfg.batches, kineto or None)}
    try:
        out["verdict"] = verdict(cfg.events, cfg.batches)
    except Exception as exc:  # keep the GPU figures even if the verdict fails
        out["verdict_error"] = repr(exc)
    out["events"] = len(cfg.events)
    return out


def dataset(work: Path, images: int) -> Path:
    sys.path.insert(0, str(REPO / "src"))
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    t0 = time.perf_counter()
    generate_image_folder(work / "data", DatasetSpec(images=images, seed=0), workers=min(os.cpu_count() or 1, 16))
    print(f"dataset: {images} images in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return work / "data"


def _row(arch: str, workers: int, run: dict, a: dict) -> dict:
    r0 = (a.get("gpu", {}).get("ranks") or {}).get(0, {})
    k = r0.get("kineto") or {}
    tel = r0.get("telemetry") or {}
    res = run["results"][0] if run["results"] else {}
    gw = r0.get("gpu_idle_waiting_for_data_ms") or {}
    gs = r0.get("gpu_step_ms") or {}
    return {
        "arch": arch, "workers": workers, "rc": run["rc"], "images_per_s": res.get("images_per_s"),
        "host_wait_share": r0.get("host_wait_share"), "gpu_data_idle_share": r0.get("data_idle_share_of_gpu_time"),
        "gpu_idle_wait_mean_ms": gw.get("mean"), "gpu_step_mean_ms": gs.get("mean"),
        "kineto_idle_share": k.get("gpu_idle_share"), "kineto_batches": k.get("batches_compared"),
        "agreement_mean_pct_of_step": k.get("agreement_mean_pct_of_step"),
        "agreement_total_pct_of_steps": k.get("agreement_total_pct_of_steps"),
        "abs_diff_max_ms": (k.get("abs_diff_ms") or {}).get("max"), "mean_step_ms": k.get("mean_step_ms"),
        "util_pct": tel.get("util_pct_mean"), "power_w": tel.get("power_w_mean"),
        "energy_per_sample_j": tel.get("energy_per_sample_j"),
    }


def _md(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |\n" for r in rows)


def sweep(a) -> dict:
    data = dataset(a.work, a.images)
    rows, runs = [], {}
    for arch in a.archs:
        for w in a.workers:
            name = f"{arch}_b{a.batch_size}_w{w}"
            tdir = a.work / "traces" / name
            run = run_example([str(data), "-a", arch, "-b", str(a.batch_size), "-j", str(w), "--epochs", "1",
                               "--train-loop", str(a.steps), "--trace-dir", str(tdir), "--profile",
                               "--profile-skip", str(a.profile_skip), "--profile-steps", str(a.profile_steps),
                               "--telemetry", "--print-freq", "0"], a.work / f"{name}.log")
            try:
                an = analyse(tdir) if run["rc"] == 0 else {}
            except Exception as exc:
                an = {"error": repr(exc)}
            runs[name] = {"run": run, "analysis": an}
            rows.append(_row(arch, w, run, an))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            if a.figures and run["rc"] == 0 and w in (min(a.workers), max(a.workers)) and arch == a.archs[0]:
                _figure(tdir, a.out / f"gpu_batches_{name}.png")
    cols = ["arch", "workers", "images_per_s", "host_wait_share", "gpu_data_idle_share", "gpu_idle_wait_mean_ms",
            "gpu_step_mean_ms", "kineto_idle_share", "kineto_batches", "agreement_mean_pct_of_step",
            "agreement_total_pct_of_steps", "abs_diff_max_ms", "util_pct", "power_w", "energy_per_sample_j"]
    return {"rows": rows, "runs": runs, "md": _md(rows, cols)}


def _figure(tdir: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from lotus.analysis.chrome import read_kineto
    from lotus.analysis.gpu import gpu_batches, kineto_gpu_busy, plot_gpu_batches
    from lotus.analysis.runs import load_config

    cfg = load_config(tdir)
    kin = {b.rank: b for b in (kineto_gpu_busy(read_kineto(p), p.name) for p in cfg.kineto) if b.events}
    fig = plot_gpu_batches(gpu_batches(cfg.batches, kin or None))
    fig.suptitle(tdir.name)
    fig.savefig(out, dpi=110)


def overhead(a) -> dict:
    data = dataset(a.work, a.images)
    rows = []
    for w in a.workers:
        ips: dict[str, list[float]] = {"untraced": [], "traced": []}
        cpu: dict[str, list[float]] = {"untraced": [], "traced": []}
        for rep in range(a.repeats):
            order = ["untraced", "traced"] if rep % 2 == 0 else ["traced", "untraced"]
            for mode in order:
                name = f"ovh_{a.archs[0]}_w{w}_{mode}_{rep}"
                extra = ["--no-trace"] if mode == "untraced" else ["--trace-dir", str(a.work / "traces" / name)]
                run = run_example([str(data), "-a", a.archs[0], "-b", str(a.batch_size), "-j", str(w), "--epochs",
                                   "1", "--train-loop", str(a.steps), "--print-freq", "0", *extra],
                                  a.work / f"{name}.log")
                if run["rc"] == 0 and run["results"]:
                    res = run["results"][0]
                    ips[mode].append(res["images_per_s"])
                    cpu[mode].append(res["cpu_workers_s"] / max(res["images"], 1) * 1e3)  # ms per image
        ratios = [t / u for t, u in zip(ips["traced"], ips["untraced"], strict=False)]
        cpu_ratios = [t / u for t, u in zip(cpu["traced"], cpu["untraced"], strict=False) if u]
        rows.append({"arch": a.archs[0], "workers": w, "untraced_images_per_s": ips["untraced"],
                     "traced_images_per_s": ips["traced"],
                     "median_throughput_ratio": statistics.median(ratios) if ratios else None,
                     "worker_cpu_ms_per_image_untraced": cpu["untraced"],
                     "worker_cpu_ms_per_image_traced": cpu["traced"],
                     "median_worker_cpu_ratio": statistics.median(cpu_ratios) if cpu_ratios else None})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    cpu = subprocess.run([sys.executable, str(REPO / "benchmarks" / "overhead.py"), "--images", "1280", "--rounds",
                          str(a.rounds), "--json", str(a.out / "overhead_cpu_pipeline.json")],
                         capture_output=True, text=True, env=_env(), timeout=900, check=False)
    md = _md(rows, ["arch", "workers", "untraced_images_per_s", "traced_images_per_s", "median_throughput_ratio",
                    "median_worker_cpu_ratio"])
    return {"rows": rows, "md": md + "\n```\n" + cpu.stdout + "```\n", "cpu_pipeline_stdout": cpu.stdout,
            "cpu_pipeline_stderr_tail": cpu.stderr[-2000:]}


def ddp(a) -> dict:
    data = dataset(a.work, a.images)
    out = {}
    rows = []
    for arch in a.archs:
        for w in a.workers:
            name = f"ddp{a.gpus}_{arch}_b{a.batch_size}_w{w}"
            tdir = a.work / "traces" / name
            run = run_example([str(data), "-a", arch, "-b", str(a.batch_size), "-j", str(w), "--epochs", "1",
                               "--train-loop", str(a.steps), "--trace-dir", str(tdir), "--profile",
                               "--profile-skip", str(a.profile_skip), "--profile-steps", str(a.profile_steps),
                               "--telemetry", "--print-freq", "0"], a.work / f"{name}.log", torchrun=a.gpus)
            try:
                an = analyse(tdir) if run["rc"] == 0 else {}
            except Exception as exc:
                an = {"error": repr(exc)}
            out[name] = {"run": run, "analysis": an}
            for rank, r in (an.get("gpu", {}).get("ranks") or {}).items():
                row = _row(arch, w, run, {"gpu": {"ranks": {0: r}}})
                row["rank"] = rank
                row["images_per_s"] = next((x["images_per_s"] for x in run["results"] if x["rank"] == rank), None)
                rows.append(row)
            out[name]["straggler"] = an.get("gpu", {}).get("straggler")
            print(json.dumps(rows[-2:], default=str), file=sys.stderr, flush=True)
    cols = ["arch", "workers", "rank", "images_per_s", "host_wait_share", "gpu_data_idle_share",
            "kineto_idle_share", "agreement_mean_pct_of_step", "util_pct", "power_w", "energy_per_sample_j"]
    strag = "\n".join(f"- {k}: straggler {json.dumps(v.get('straggler'))}" for k, v in out.items())
    return {"rows": rows, "runs": out, "md": _md(rows, cols) + "\n" + strag + "\n"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["sweep", "overhead", "ddp"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/lotus-gpu-validation"))
    p.add_argument("--archs", nargs="+", default=["resnet18"])
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--images", type=int, default=6400)
    p.add_argument("--profile-skip", type=int, default=10)
    p.add_argument("--profile-steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--no-figures", dest="figures", action="store_false")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "src"))
    result = {"sweep": sweep, "overhead": overhead, "ddp": ddp}[a.phase](a)
    result["args"] = {k: str(v) for k, v in vars(a).items()}
    (a.out / f"{a.phase}.json").write_text(json.dumps(result, indent=1, default=str))
    (a.out / f"{a.phase}.md").write_text(result["md"])
    print(result["md"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
