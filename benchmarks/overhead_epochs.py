"""Tracing's end-to-end cost where workers are forked every epoch: lotus's DataLoader (tracing on) against
torch's own, epoch by epoch, alternating which goes first, in one process.

Short epochs of fresh (not persistent) workers pay each worker's start and end every epoch: the tracer's set-up
in every worker (its trace file, its writer thread, the dataset's instrumentation) is then a share of each epoch,
not of the run. The samples spin ``--sample-ms`` of CPU (a tokenizer-like Python cost), the loop a ``--step-ms``
busy step; the median over epochs of the ratio of the pair's wall times (lotus / torch).

    taskset -c 0,1 python benchmarks/overhead_epochs.py --workers 2,8,16 --epochs 30
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def _spin(ms: float) -> None:
    end = time.perf_counter_ns() + int(ms * 1e6)
    while time.perf_counter_ns() < end:
        pass


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

    print(f"{a.samples // a.batch_size}-batch epochs, {a.sample_ms:g} ms samples, {a.step_ms:g} ms step; "
          "median over epochs of lotus (tracing) / torch, each epoch's pair in alternating order")
    for w in (int(x) for x in a.workers.split(",")):
        traced = DataLoader(Spin(), batch_size=a.batch_size, num_workers=w, shuffle=True,
                            trace_dir=tempfile.mkdtemp(prefix="lotus-ovh-"))
        stock = TorchLoader(Spin(), batch_size=a.batch_size, num_workers=w, shuffle=True)
        t = {"lotus": [], "torch": []}
        for e in range(a.epochs):
            for name, dl in ((("lotus", traced), ("torch", stock)) if e % 2 == 0 else
                             (("torch", stock), ("lotus", traced))):
                t0 = time.perf_counter()
                for _ in dl:
                    _spin(a.step_ms)
                t[name].append(time.perf_counter() - t0)
        r = [x / y for x, y in zip(t["lotus"], t["torch"], strict=True)]
        q = statistics.quantiles(r, n=4)
        print(f"  {w:3d} workers: lotus {1e3 * statistics.median(t['lotus']):7.1f} ms, torch "
              f"{1e3 * statistics.median(t['torch']):7.1f} ms an epoch; ratio {statistics.median(r):.3f} "
              f"(quartiles {q[0]:.3f}-{q[2]:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
