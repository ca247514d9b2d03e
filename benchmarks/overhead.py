"""Overhead of lotus tracing: stock torch DataLoader vs lotus (tracing on), interleaved in one run.

JPEG pipeline of the original study: decode (PIL), RandomResizedCrop(224), RandomHorizontalFlip,
ToTensor, Normalize; batch 64; 2 workers (defaults). Each round runs one epoch with every variant,
in an order that alternates between rounds; the figure is the median over rounds of the per-round
time ratio (traced / stock). A second, in-process measurement gives the cost per recorded event:
the same op calls with and without the lotus wrappers, divided by the number of events written.

    python benchmarks/overhead.py                 # ~2 min on 2 cores
    python benchmarks/overhead.py --json out.json --rounds 9 --images 2560
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _dataset(root: Path, images: int):
    import torchvision
    from torchvision import transforms as T

    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    data = generate_image_folder(root, DatasetSpec(images=images, seed=1))
    return torchvision.datasets.ImageFolder(str(data), transform=T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]))


def _children_cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _epoch_seconds(make_loader) -> tuple[float, int, float]:
    """Wall seconds of one epoch, images, and CPU seconds its workers used (they exit with the epoch)."""
    import gc

    loader = make_loader()
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    n = 0
    for images, _ in loader:
        n += images.shape[0]
    dt = time.perf_counter() - t0
    del loader
    gc.collect()  # the exhausted iterator has joined its workers; their CPU time is now counted
    return dt, n, _children_cpu_s() - cpu0


def bootstrap_ratio_ci(a: list[float], b: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of median(a) / median(b) over rounds resampled with replacement (paired)."""
    import random

    rng = random.Random(seed)
    k = len(a)
    ratios = []
    for _ in range(n):
        idx = [rng.randrange(k) for _ in range(k)]
        ratios.append(statistics.median(a[i] for i in idx) / statistics.median(b[i] for i in idx))
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


def end_to_end(ds, rounds: int, batch_size: int, workers: int, trace_root: Path) -> dict:
    import torch

    from lotus.dataloader import DataLoader
    from lotus.trace import load_events
    from lotus.trace.writer import close_main_writers

    def stock():
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers, shuffle=True)

    def untraced():
        return DataLoader(ds, batch_size=batch_size, num_workers=workers, shuffle=True)

    traced_dirs = []

    def traced():
        d = trace_root / f"r{len(traced_dirs)}"
        traced_dirs.append(d)
        return DataLoader(ds, batch_size=batch_size, num_workers=workers, shuffle=True, trace_dir=d)

    variants = {"stock": stock, "lotus-untraced": untraced, "lotus-traced": traced}
    for make in variants.values():  # warm-up: page cache, imports, first fork
        _epoch_seconds(make)
    times: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            dt, n, c = _epoch_seconds(variants[name])
            times[name].append(dt)
            cpu[name].append(c)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in names),
              file=sys.stderr)
    close_main_writers()
    n_images = n
    events = [len(load_events(d)) for d in traced_dirs[1:]]  # skip the warm-up run
    ratio = [t / s for t, s in zip(times["lotus-traced"], times["stock"], strict=True)]
    ratio_off = [t / s for t, s in zip(times["lotus-untraced"], times["stock"], strict=True)]
    cpu_ratio = [t / s for t, s in zip(cpu["lotus-traced"], cpu["stock"], strict=True) if s > 0]
    vs_untraced = [t / u for t, u in zip(times["lotus-traced"], times["lotus-untraced"], strict=True)]
    cpu_vs_untraced = [t / u for t, u in zip(cpu["lotus-traced"], cpu["lotus-untraced"], strict=True) if u > 0]
    cpu_ratio_off = [t / s for t, s in zip(cpu["lotus-untraced"], cpu["stock"], strict=True) if s > 0]
    return {
        "worker_cpu_seconds": cpu,
        "median_time_ratio_traced_vs_untraced": statistics.median(vs_untraced),
        "ratio_of_medians_traced_vs_untraced": statistics.median(times["lotus-traced"])
        / statistics.median(times["lotus-untraced"]),
        "ratio_of_medians_ci95": bootstrap_ratio_ci(times["lotus-traced"], times["lotus-untraced"]),
        "cpu_ratio_of_medians_traced_vs_untraced": (statistics.median(cpu["lotus-traced"])
                                                    / statistics.median(cpu["lotus-untraced"])
                                                    if statistics.median(cpu["lotus-untraced"]) else None),
        "cpu_ratio_of_medians_ci95": (bootstrap_ratio_ci(cpu["lotus-traced"], cpu["lotus-untraced"])
                                      if min(cpu["lotus-untraced"]) > 0 else None),
        "median_worker_cpu_ratio_traced_vs_untraced": statistics.median(cpu_vs_untraced) if cpu_vs_untraced else None,
        "median_worker_cpu_ratio_traced_vs_stock": statistics.median(cpu_ratio) if cpu_ratio else None,
        "median_worker_cpu_ratio_untraced_vs_stock": statistics.median(cpu_ratio_off) if cpu_ratio_off else None,
        "images_per_epoch": n_images,
        "seconds": times,
        "throughput_images_per_s": {k: statistics.median(n_images / t for t in v) for k, v in times.items()},
        "median_time_ratio_traced_vs_stock": statistics.median(ratio),
        "median_time_ratio_untraced_vs_stock": statistics.median(ratio_off),
        "events_per_epoch": statistics.median(events),
    }


class _CheapDS:
    """A dataset shaped like ImageFolder (load, then a 4-op Compose) whose work is nearly free, so the
    difference traced - untraced is the tracer's own cost per item."""

    def __init__(self, n: int):
        from torchvision import transforms as T

        self.n = n
        self.transform = T.Compose([_Id(), _Id(), _Id(), _Id()])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.transform(i), 0


class _Id:
    def __call__(self, x):
        return x


def per_event_cost(samples: int = 20_000, repeats: int = 7) -> dict:
    """ns added per recorded event in the real event mix of a sample (sample, load, transform, 4 ops)
    plus collation, through the same wrappers the workers use."""
    from lotus.dataloader.instrument import SampleProxy, TimedCollate
    from lotus.dataloader.recorder import Recorder
    from lotus.dataloader.transforms import TransformSwap
    from lotus.trace.writer import TraceWriter

    ds = _CheapDS(samples)
    with tempfile.TemporaryDirectory() as tmp:
        w = TraceWriter(tmp, "worker", worker_id=0)
        rec = Recorder(w, 0, 0, None, worker_id=0)
        proxy = SampleProxy(ds, rec, iterable=False)
        swap = TransformSwap(ds, rec)
        collate = TimedCollate(list, rec, envelope=False)
        batches = [list(range(b, min(b + 64, samples))) for b in range(0, samples, 64)]
        plain, timed, n_events = [], [], 0
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for b in batches:
                list([ds[i] for i in b])
            plain.append(time.perf_counter_ns() - t0)
            w.buf = bytearray()
            t0 = time.perf_counter_ns()
            with swap:
                for b in batches:
                    collate([proxy[i] for i in b])
            timed.append(time.perf_counter_ns() - t0)
            n_events = len(w.buf) // 48
            t0 = time.perf_counter_ns()
            w.flush()
            timed[-1] += time.perf_counter_ns() - t0
        w.close()
    diff = min(timed) - min(plain)
    return {"samples": samples, "events": n_events, "ns_per_event": diff / n_events,
            "events_per_sample": n_events / samples}


def hot_path_cost(n: int = 200_000) -> dict:
    """Cost of one op event in isolation: a no-op transform called through TimedOp vs directly."""
    from lotus.dataloader.recorder import Recorder
    from lotus.dataloader.transforms import TimedOp
    from lotus.trace.writer import TraceWriter

    def noop(x):
        return x

    with tempfile.TemporaryDirectory() as tmp:
        w = TraceWriter(tmp, "worker", worker_id=0)
        rec = Recorder(w, 0, 0, None, worker_id=0)
        op = TimedOp(noop, "noop", rec)
        best_plain = best_timed = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for i in range(n):
                noop(i)
            best_plain = min(best_plain, time.perf_counter_ns() - t0)
            w.buf = bytearray()
            t0 = time.perf_counter_ns()
            for i in range(n):
                op(i)
            best_timed = min(best_timed, time.perf_counter_ns() - t0)
            t0 = time.perf_counter_ns()
            w.flush()
            flush_ns = time.perf_counter_ns() - t0
        w.close()
    return {"ns_per_event": (best_timed - best_plain) / n, "flush_ns_per_event": flush_ns / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1280)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lotus-bench-data")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    import torch

    ds = _dataset(args.data, args.images)
    with tempfile.TemporaryDirectory() as tmp:
        e2e = end_to_end(ds, args.rounds, args.batch_size, args.workers, Path(tmp))
    per_event = per_event_cost()
    hot = hot_path_cost()
    result = {
        "config": {"images": args.images, "rounds": args.rounds, "batch_size": args.batch_size,
                   "workers": args.workers, "cpus": os.cpu_count(), "torch": torch.__version__,
                   "python": sys.version.split()[0]},
        "end_to_end": e2e, "per_event_in_pipeline": per_event, "hot_path": hot,
    }
    slowdown = (e2e["median_time_ratio_traced_vs_stock"] - 1) * 100
    print(f"overhead: {args.images} JPEGs/epoch, batch {args.batch_size}, {args.workers} workers, "
          f"{args.rounds} interleaved rounds, torch {torch.__version__}, {os.cpu_count()} CPUs")
    tp = e2e["throughput_images_per_s"]
    print(f"  throughput (median images/s): stock {tp['stock']:.1f}, lotus untraced {tp['lotus-untraced']:.1f}, "
          f"lotus traced {tp['lotus-traced']:.1f}")
    print(f"  median time ratio traced/stock: {e2e['median_time_ratio_traced_vs_stock']:.4f} "
          f"({slowdown:+.2f}%); untraced/stock: {e2e['median_time_ratio_untraced_vs_stock']:.4f}")
    if e2e["median_worker_cpu_ratio_traced_vs_stock"] is not None:
        print(f"  median worker CPU-time ratio traced/stock: {e2e['median_worker_cpu_ratio_traced_vs_stock']:.4f} "
              f"({(e2e['median_worker_cpu_ratio_traced_vs_stock'] - 1) * 100:+.2f}%); untraced/stock: "
              f"{e2e['median_worker_cpu_ratio_untraced_vs_stock']:.4f} (the noise floor: same code as stock)")
    lo, hi = e2e["ratio_of_medians_ci95"]
    print(f"  traced vs lotus untraced (same DataLoader class, tracing off): median of per-round time ratios "
          f"{(e2e['median_time_ratio_traced_vs_untraced'] - 1) * 100:+.2f}%; ratio of medians "
          f"{(e2e['ratio_of_medians_traced_vs_untraced'] - 1) * 100:+.2f}% "
          f"(95% bootstrap interval {(lo - 1) * 100:+.2f}% .. {(hi - 1) * 100:+.2f}%)")
    if e2e["cpu_ratio_of_medians_ci95"] is not None:
        clo, chi = e2e["cpu_ratio_of_medians_ci95"]
        print(f"  worker CPU time, traced vs untraced: ratio of medians "
              f"{(e2e['cpu_ratio_of_medians_traced_vs_untraced'] - 1) * 100:+.2f}% "
              f"(95% interval {(clo - 1) * 100:+.2f}% .. {(chi - 1) * 100:+.2f}%)")
    print(f"  events per epoch: {e2e['events_per_epoch']:.0f} "
          f"({e2e['events_per_epoch'] / e2e['images_per_epoch']:.1f} per image)")
    print(f"  cost per recorded event: {per_event['ns_per_event']:.0f} ns (sample/load/transform/op/collate mix, "
          f"in-process, flush included); {hot['ns_per_event']:.0f} ns for a lone op event; "
          f"flush alone {hot['flush_ns_per_event']:.1f} ns/event")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
