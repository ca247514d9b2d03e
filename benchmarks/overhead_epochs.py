"""Tracing's end-to-end cost where workers are forked every epoch: lotus's DataLoader (tracing on) against
torch's own, epoch by epoch, in one process, with torch against itself beside it (the control: what the same
code reads).

Short epochs of fresh (not persistent) workers pay each worker's start and end every epoch: the tracer's set-up
in every worker (its trace file, its writer thread, the dataset's instrumentation) is then a share of each epoch,
not of the run. The samples spin ``--sample-ms`` of CPU (a tokenizer-like Python cost), the loop a ``--step-ms``
busy step; the three loaders run in a random order each epoch; the median over epochs of the ratio of the epochs'
wall times (lotus / torch), with a bootstrap 95% interval; then where the difference goes, phase by phase
(``iter()``: forking the workers; to the first batch: the workers' start and first batch; the batches; the end:
the last step and the workers' shutdown), each the median over epochs of lotus's time minus torch's.

    taskset -c 0,1 python benchmarks/overhead_epochs.py --workers 2,8,16 --epochs 40
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time


def _spin(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


def _median_ci(x: list[float], rng, n: int = 2000) -> tuple[float, float]:
    """A bootstrap 95% interval of the median of ``x``."""
    meds = sorted(statistics.median(rng.choices(x, k=len(x))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="2,8,16")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sample-ms", type=float, default=2.0)
    p.add_argument("--step-ms", type=float, default=2.0)
    a = p.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than CPUs: meant
    import torch
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import Dataset

    from lotus.dataloader import DataLoader

    class Spin(Dataset):
        def __len__(self):
            return a.samples

        def __getitem__(self, i):
            _spin(a.sample_ms)
            return torch.zeros(3, 32, 32), i

    rng = random.Random(0)
    print(f"{a.samples // a.batch_size}-batch epochs, {a.sample_ms:g} ms samples, {a.step_ms:g} ms step; "
          "median over epochs of lotus (tracing) / torch, the loaders in a random order each epoch")
    for w in (int(x) for x in a.workers.split(",")):
        loaders = {"lotus": DataLoader(Spin(), batch_size=a.batch_size, num_workers=w, shuffle=True,
                                       trace_dir=tempfile.mkdtemp(prefix="lotus-ovh-")),
                   "torch": TorchLoader(Spin(), batch_size=a.batch_size, num_workers=w, shuffle=True),
                   "torch2": TorchLoader(Spin(), batch_size=a.batch_size, num_workers=w, shuffle=True)}
        t = {k: [] for k in loaders}
        phases = {k: [] for k in loaders}  # per epoch: iter(), to the first batch, the batches, the end
        for _ in range(a.epochs):
            order = list(loaders)
            rng.shuffle(order)  # each epoch's three in a random order
            for name in order:
                t0 = time.perf_counter()
                it = iter(loaders[name])
                t1 = first = last = time.perf_counter()
                for n, _ in enumerate(it):
                    last = time.perf_counter()
                    if not n:
                        first = last
                    _spin(a.step_ms)
                t_end = time.perf_counter()
                t[name].append(t_end - t0)
                phases[name].append((t1 - t0, first - t1, last - first, t_end - last))
        r = [x / y for x, y in zip(t["lotus"], t["torch"], strict=True)]
        c = [x / y for x, y in zip(t["torch2"], t["torch"], strict=True)]
        lo, hi = _median_ci(r, rng)
        clo, chi = _median_ci(c, rng)
        print(f"  {w:3d} workers: lotus {1e3 * statistics.median(t['lotus']):7.1f} ms, torch "
              f"{1e3 * statistics.median(t['torch']):7.1f} ms an epoch; ratio {statistics.median(r):.3f} "
              f"(95% {lo:.3f}-{hi:.3f}); control torch/torch {statistics.median(c):.3f} ({clo:.3f}-{chi:.3f})",
              flush=True)
        # where the difference goes: each phase's median over epochs of lotus - torch (torch2 - torch beside)
        cells = []
        for i, ph in enumerate(("iter()", "to the first batch", "the batches", "the end (step, shutdown)")):
            d = [x[i] - y[i] for x, y in zip(phases["lotus"], phases["torch"], strict=True)]
            dc = [x[i] - y[i] for x, y in zip(phases["torch2"], phases["torch"], strict=True)]
            lo, hi = _median_ci(d, rng)
            cells.append(f"{ph} {1e3 * statistics.median(d):+.1f} ms ({1e3 * lo:+.1f}..{1e3 * hi:+.1f}; "
                         f"control {1e3 * statistics.median(dc):+.1f})")
        print("       lotus - torch: " + ", ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
