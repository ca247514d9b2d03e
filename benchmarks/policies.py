"""Loader policies vs torch on a heavy-tailed pipeline: wait time and throughput, interleaved in one run.

Dataset: ImageNet-like JPEGs where a fraction of the images is several times larger (mixed image
sizes: decode cost is heavy-tailed). Pipeline: decode, RandomResizedCrop(224), flip, ToTensor,
Normalize. The training step is simulated by a sleep (a GPU step costs the CPU nothing), so the loop
waits exactly when the input pipeline is late. Every round runs one epoch per variant, in an order
that alternates between rounds; figures are medians over rounds.

    python benchmarks/policies.py --workers 4 --step-ms 40 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

VARIANTS = {
    "torch": None,
    "round_robin+in_order": ("round_robin", "in_order"),
    "free_worker+in_order": ("free_worker", "in_order"),
    "round_robin+lowest_ready_first": ("round_robin", "lowest_ready_first"),
    "free_worker+lowest_ready_first": ("free_worker", "lowest_ready_first"),
    "arrival (torch in_order=False)": ("round_robin", "arrival"),
}


def make_dataset(root: Path, images: int, large_share: float, large_scale: float, seed: int = 0) -> Path:
    """ImageFolder of JPEGs: most ImageNet-sized, ``large_share`` of them ``large_scale`` times larger."""
    from PIL import Image

    from lotus.demo.dataset import source_photos

    marker = root / f"policies-{images}-{large_share}-{large_scale}-{seed}.done"
    train = root / "train"
    if marker.exists():
        return train
    rng = random.Random(seed)
    photos = [Image.open(p).convert("RGB") for p in source_photos()]
    for c in range(4):
        (train / f"c{c}").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        base = rng.choice(photos)
        scale = large_scale if rng.random() < large_share else 1.0
        w, h = int(500 * scale), int(375 * scale)
        base.resize((w, h)).save(train / f"c{i % 4}" / f"{i:05d}.jpg", quality=90)
    marker.write_text("ok")
    return train


def one_epoch(make, step_s: float) -> dict:
    loader = make()
    waits = []
    n = 0
    t0 = time.perf_counter()
    it = iter(loader)
    while True:
        w0 = time.perf_counter()
        try:
            x, _ = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - w0)
        n += x.shape[0]
        time.sleep(step_s)  # the "GPU step"
    total = time.perf_counter() - t0
    del it, loader
    return {"seconds": total, "images": n, "wait_s": sum(waits), "p90_wait_ms": statistics.quantiles(
        waits, n=10)[-1] * 1e3 if len(waits) > 1 else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=1536)
    ap.add_argument("--large-share", type=float, default=0.1)
    ap.add_argument("--large-scale", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path("/tmp/lotus-policies-data"))
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    import torch
    import torchvision
    from torchvision import transforms as T

    from lotus.dataloader import DataLoader

    ds = torchvision.datasets.ImageFolder(str(make_dataset(a.data, a.images, a.large_share, a.large_scale)),
                                          transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                                               T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)]))

    def maker(policy):
        kw = dict(batch_size=a.batch_size, num_workers=a.workers, shuffle=True,
                  generator=torch.Generator().manual_seed(0))
        if policy is None:
            return lambda: torch.utils.data.DataLoader(ds, **kw)
        return lambda: DataLoader(ds, worker_assignment=policy[0], delivery_order=policy[1], **kw)

    makers = {k: maker(v) for k, v in VARIANTS.items()}
    one_epoch(makers["torch"], a.step_ms / 1e3)  # warm the page cache
    runs: dict[str, list[dict]] = {k: [] for k in VARIANTS}
    names = list(VARIANTS)
    for r in range(a.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            runs[name].append(one_epoch(makers[name], a.step_ms / 1e3))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for name, rs in runs.items():
        rows.append({"variant": name,
                     "images_per_s": statistics.median(x["images"] / x["seconds"] for x in rs),
                     "wait_s": statistics.median(x["wait_s"] for x in rs),
                     "wait_share": statistics.median(x["wait_s"] / x["seconds"] for x in rs),
                     "p90_wait_ms": statistics.median(x["p90_wait_ms"] for x in rs)})
    base = rows[0]
    print(f"policies: {a.images} JPEGs ({a.large_share:.0%} are {a.large_scale:g}x larger), batch {a.batch_size}, "
          f"{a.workers} workers, {a.step_ms:g} ms simulated step, {a.rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs, torch {torch.__version__}")
    print(f"  {'variant':34} {'images/s':>9} {'vs torch':>9} {'wait s':>8} {'wait %':>7} {'p90 wait ms':>12}")
    for r in rows:
        print(f"  {r['variant']:34} {r['images_per_s']:9.1f} {r['images_per_s'] / base['images_per_s']:9.3f} "
              f"{r['wait_s']:8.2f} {r['wait_share']:7.1%} {r['p90_wait_ms']:12.1f}")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows, "runs": runs},
                                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
