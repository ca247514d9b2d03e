"""Calibration of the steady-rate interval on simulated DataLoader hand-offs of known structure (issue 24).

Each shape is a stationary process simulated with :func:`lotus.sim.run_loader` (workers, in-order
delivery, prefetch) epoch after epoch: per-batch preparation and step times drawn at random (log-normal),
an epoch restart gap between epochs (fresh workers or persistent ones), a window of fixed length in
batches (a steps cap) or in seconds (a job timed by its own clock). For ``--runs`` independent runs of one
shape, the estimator (:func:`lotus.analysis.steady.steady_rate`, as every lotus command uses it) gives a rate
and an interval per run; scored as ``benchmarks/calibration.py`` scores real repeats:

* coverage: share of runs whose interval holds the mean of the other runs' rates (target >= 90%);
* width ratio: mean half-width over the runs' empirical 95% half-width (``t975(n-1) x sd``; target <= 2).

    python benchmarks/calibration_sim.py --runs 300
    python benchmarks/calibration_sim.py --runs 300 --shapes short-epochs,few-restarts --json out.json

``shapes()`` and ``score_shape()`` are what tests/trace/test_steady_calibration.py runs (fewer runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

import numpy as np

MS = 1_000_000


@dataclass(frozen=True)
class Shape:
    name: str
    workers: int
    prep_ms: float  # mean preparation of one batch by one worker
    prep_sigma: float  # log-normal sigma of preparation
    step_ms: float
    step_sigma: float
    epoch_batches: int
    restart_ms: float  # between an epoch's last hand-off and the next epoch's first dispatch
    restart_sigma: float
    boot_ms: float = 0.0  # fresh workers' start (non-persistent workers), one after the other
    batches: int | None = None  # window: this many hand-offs in all (a steps cap)
    seconds: float | None = None  # or: hand-offs within this many seconds (the job's own clock)
    prefetch: int = 2
    batch_size: int = 16
    epoch_sigma: float = 0.0  # log-normal spread of an epoch's pace: hand-offs inside one epoch are correlated


def shapes() -> list[Shape]:
    """Job shapes on the axes the issue names: workers vs CPUs, restarts, bursts, tails, window kinds."""
    return [
        Shape("steady", 2, 40, 0.2, 10, 0.1, 100_000, 0, 0, batches=400),
        Shape("input-bound-8w", 8, 160, 0.3, 5, 0.1, 100_000, 0, 0, batches=600),
        Shape("heavy-tail", 4, 60, 1.0, 10, 0.1, 100_000, 0, 0, batches=500),
        Shape("step-bound", 4, 20, 0.3, 15, 0.05, 100_000, 0, 0, batches=400),
        Shape("no-workers", 0, 8, 0.2, 4, 0.1, 100_000, 0, 0, batches=400),
        Shape("short-epochs", 4, 30, 0.3, 2, 0.1, 32, 60, 0.3, boot_ms=40, batches=600),
        Shape("short-epochs-time", 4, 30, 0.3, 2, 0.1, 32, 60, 0.3, boot_ms=40, seconds=8.0),
        Shape("short-persistent", 4, 30, 0.3, 2, 0.1, 32, 5, 0.3, batches=600),
        Shape("few-restarts", 16, 800, 0.15, 40, 0.05, 64, 300, 0.2, batches=330),
        Shape("few-restarts-time", 16, 800, 0.15, 40, 0.05, 64, 300, 0.2, seconds=20.0),
        Shape("ramp-only", 8, 80, 0.2, 30, 0.1, 100_000, 0, 0, batches=60),
        # the GPU host's ResNet-18 (H200, 16 workers, 64-batch epochs): epochs differ in pace as a whole
        Shape("epoch-paced", 16, 800, 0.15, 40, 0.05, 64, 700, 0.2, batches=330, epoch_sigma=0.1),
        Shape("epoch-paced-time", 16, 800, 0.15, 40, 0.05, 64, 700, 0.2, seconds=15.0, epoch_sigma=0.1),
        # a short run of two whole epochs (the H200 DDP run of benchmarks/jobs/ddp_jpeg.py: 5 persistent workers,
        # 64-batch epochs, 128 steps): the window holds one epoch start and two partial epochs
        Shape("two-epochs", 5, 300, 0.2, 40, 0.1, 64, 150, 0.3, batches=128),
        Shape("two-epochs-paced", 5, 300, 0.2, 40, 0.1, 64, 150, 0.3, batches=128, epoch_sigma=0.1),
        Shape("two-epochs-paced2", 5, 300, 0.2, 40, 0.1, 64, 150, 0.3, batches=128, epoch_sigma=0.2),
        Shape("three-epochs-paced", 5, 300, 0.2, 40, 0.1, 64, 150, 0.3, batches=192, epoch_sigma=0.1),
    ]


def simulate(shape: Shape, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Hand-off times (ns) and epochs of one run of ``shape``."""
    from lotus.sim import run_loader

    t_all, ep_all = [], []
    t0, epoch, total = 0, 0, 0
    limit_b = shape.batches if shape.batches is not None else 10**9
    limit_ns = shape.seconds * 1e9 if shape.seconds is not None else float("inf")
    ramp = max(shape.workers * shape.prefetch, 1)
    while total < limit_b:
        e = shape.epoch_batches
        pace = rng.lognormal(-shape.epoch_sigma ** 2 / 2, shape.epoch_sigma) if shape.epoch_sigma else 1.0
        prep = (pace * shape.prep_ms * MS * rng.lognormal(-shape.prep_sigma ** 2 / 2, shape.prep_sigma, e)).astype(
            np.int64)
        step = (shape.step_ms * MS * rng.lognormal(-shape.step_sigma ** 2 / 2, shape.step_sigma, e)).astype(np.int64)
        disp = np.full(e, 20_000)
        wait = np.full(e, 30_000)
        start = None
        if shape.workers and shape.boot_ms:
            start = [t0 + int((k + 1) * shape.boot_ms * MS) for k in range(shape.workers)]
        lt = run_loader(prep, step, n_workers=shape.workers, prefetch_factor=shape.prefetch, dispatch_dur_ns=disp,
                        ready_wait_ns=wait, late_wait_ns=wait, t0_ns=t0, worker_start_ns=start)
        c = lt.consumed_ns
        t_all.append(c)
        ep_all.append(np.full(len(c), epoch))
        total += len(c)
        if len(np.concatenate(t_all)) > ramp and c[-1] - np.concatenate(t_all)[ramp - 1] > limit_ns:
            break
        g = shape.restart_ms * MS * rng.lognormal(-shape.restart_sigma ** 2 / 2, shape.restart_sigma) \
            if shape.restart_ms else 0
        t0 = int(lt.loop_end_ns + g)
        epoch += 1
    t = np.concatenate(t_all)
    ep = np.concatenate(ep_all)
    if shape.batches is not None:
        return t[:shape.batches], ep[:shape.batches]
    keep = t - t[ramp - 1] <= limit_ns
    keep[:ramp] = True
    return t[keep], ep[keep]


def score_shape(shape: Shape, runs: int, seed: int = 0) -> dict:
    """Coverage and width ratio of the estimator over ``runs`` simulated runs of ``shape``."""
    from lotus.analysis.steady import steady_rate

    rng = np.random.default_rng(seed)
    rates, cis = [], []
    for _ in range(runs):
        t, ep = simulate(shape, rng)
        r = steady_rate(t, np.full(len(t), float(shape.batch_size)), ramp=max(shape.workers * shape.prefetch, 1),
                        workers=shape.workers, epochs=ep)
        if r.samples_per_s is None:
            continue
        rates.append(r.samples_per_s)
        cis.append(r.ci95)
    n = len(rates)
    if n < 3:
        return {"shape": shape.name, "runs": n, "note": "fewer than 3 rates"}
    from lotus.analysis.runspread import Reading, repeats

    r = repeats([Reading(str(i), v, ci) for i, (v, ci) in enumerate(zip(rates, cis, strict=True))])
    return {"shape": shape.name, "runs": n, "with_interval": r["with_interval"], "mean": r["mean_samples_per_s"],
            "rel_sd": r["rel_sd"], "rel_empirical_hw": r["rel_empirical_halfwidth"],
            "rel_mean_hw": r["rel_mean_halfwidth"], "coverage": r["coverage"], "width_ratio": r["width_ratio"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--shapes", default=None, help="comma-separated names (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    chosen = [s for s in shapes() if a.shapes is None or s.name in a.shapes.split(",")]
    out = []
    print(f"{'shape':20s} {'runs':>5s} {'rel sd':>7s} {'emp hw':>7s} {'hw':>7s} {'ratio':>6s} {'cover':>6s}")
    for s in chosen:
        r = score_shape(s, a.runs, a.seed)
        out.append({**r, "params": asdict(s)})
        if "coverage" not in r:
            print(f"{s.name:20s} {r['runs']:5d} {r['note']}")
            continue
        print(f"{s.name:20s} {r['runs']:5d} {r['rel_sd']:7.2%} {r['rel_empirical_hw']:7.2%} "
              f"{(r['rel_mean_hw'] or 0):7.2%} {(r['width_ratio'] or 0):6.2f} {(r['coverage'] or 0):6.1%}",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
