"""Tracer overhead with a low noise floor: stock torch and lotus alternate batch by batch in one process.

num_workers=0, so every batch is prepared on this thread and ``time.thread_time_ns()`` around each
``next()`` is the CPU time of exactly that batch (no scheduler noise from other processes). Both
loaders read the same images in the same order with deterministic transforms, so pair i compares the
same work; the order inside a pair alternates (AB, BA, ...) to cancel cache effects. The figure is the
median of per-pair ratios (lotus / torch) with a 95% bootstrap interval, and a control run of two
stock loaders reported beside it (identical code: its ratio shows the floor of the method).

Pipelines:
* ``jpeg``: ImageFolder of generated JPEGs; decode, Resize(256), CenterCrop(224), ToTensor, Normalize.
* ``trivial``: a dataset returning a small tensor per index, transform = Compose([lambda x: x + 1]);
  the difference per sample is the tracer's fixed cost.

    python benchmarks/overhead_pairs.py                      # ~3 min on 2 cores
    python benchmarks/overhead_pairs.py --pairs 1000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _jpeg_dataset(root: Path, images: int):
    import torchvision
    from torchvision import transforms as T

    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    data = generate_image_folder(root, DatasetSpec(images=images, seed=3))
    return torchvision.datasets.ImageFolder(str(data), transform=T.Compose([
        T.Resize(256), T.CenterCrop(224), T.ToTensor(),
        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]))


class _Trivial:
    """A map-style dataset of small tensors with a one-op Compose (the tracer's fixed cost)."""

    def __init__(self, n: int):
        import torch
        from torchvision import transforms as T

        self.data = torch.arange(n * 8, dtype=torch.float32).reshape(n, 8)
        self.transform = T.Compose([_plus_one])

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), i


def _plus_one(x):
    return x + 1


class _Cycler:
    """Endless batches from a loader (a new epoch when one ends)."""

    def __init__(self, loader):
        self.loader = loader
        self.it = iter(loader)

    def next_cpu_ns(self) -> int:
        t0 = time.thread_time_ns()
        try:
            next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            t0 = time.thread_time_ns()
            next(self.it)
        return time.thread_time_ns() - t0


def bootstrap_median_ci(values: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    k = len(values)
    meds = sorted(statistics.median(values[rng.randrange(k)] for _ in range(k)) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def alternate(a, b, pairs: int, warmup: int) -> dict:
    """Per-pair CPU ns of ``a`` and ``b`` (alternating which goes first); ratio b/a and difference b-a."""
    ca, cb = _Cycler(a), _Cycler(b)
    for _ in range(warmup):
        ca.next_cpu_ns()
        cb.next_cpu_ns()
    ta, tb = [], []
    for i in range(pairs):
        if i % 2 == 0:
            x = ca.next_cpu_ns()
            y = cb.next_cpu_ns()
        else:
            y = cb.next_cpu_ns()
            x = ca.next_cpu_ns()
        ta.append(x)
        tb.append(y)
    ratios = [y / x for x, y in zip(ta, tb, strict=True)]
    diffs = [y - x for x, y in zip(ta, tb, strict=True)]
    lo, hi = bootstrap_median_ci(ratios)
    dlo, dhi = bootstrap_median_ci(diffs)
    return {"pairs": pairs, "median_ratio": statistics.median(ratios), "ratio_ci95": [lo, hi],
            "median_diff_ns": statistics.median(diffs), "diff_ci95_ns": [dlo, dhi],
            "median_a_ns": statistics.median(ta), "median_b_ns": statistics.median(tb)}


def measure(ds, batch_size: int, pairs: int, warmup: int, trace_dir: Path) -> dict:
    import torch

    from lotus.dataloader import DataLoader

    def stock():
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=0)

    traced = DataLoader(ds, batch_size=batch_size, num_workers=0, trace_dir=str(trace_dir))
    out = {"lotus_vs_torch": alternate(stock(), traced, pairs, warmup),
           "torch_vs_torch": alternate(stock(), stock(), pairs, warmup)}
    for v in out.values():
        v["per_sample_diff_us"] = v["median_diff_ns"] / batch_size / 1e3
        v["per_sample_diff_ci95_us"] = [d / batch_size / 1e3 for d in v["diff_ci95_ns"]]
    return out


def _line(name: str, r: dict) -> str:
    lo, hi = r["ratio_ci95"]
    dlo, dhi = r["per_sample_diff_ci95_us"]
    return (f"  {name:15s} {r['median_ratio'] - 1:+.3%} (95% CI {lo - 1:+.3%} .. {hi - 1:+.3%}); "
            f"{r['per_sample_diff_us']:+.2f} us/sample (CI {dlo:+.2f} .. {dhi:+.2f}); "
            f"torch {r['median_a_ns'] / 1e6:.3f} ms/batch")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=600)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--pipelines", default="jpeg,trivial")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    results = {"python": sys.version.split()[0], "torch": torch.__version__, "pairs": args.pairs,
               "batch_size": args.batch_size}
    with tempfile.TemporaryDirectory(prefix="lotus-pairs-") as tmp:
        tmp = Path(tmp)
        for name in args.pipelines.split(","):
            ds = _jpeg_dataset(tmp / "data", args.images) if name == "jpeg" else _Trivial(4096)
            t0 = time.perf_counter()
            r = measure(ds, args.batch_size, args.pairs, args.warmup, tmp / f"trace-{name}")
            results[name] = r
            print(f"{name} (batch {args.batch_size}, {args.pairs} pairs, {time.perf_counter() - t0:.0f} s):")
            print(_line("lotus vs torch", r["lotus_vs_torch"]))
            print(_line("torch vs torch", r["torch_vs_torch"]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
