"""What a worker's collation into shared memory costs against the main process's, against lotus's probe.

torch's own DataLoader and default_collate, no lotus in the timed path: a dataset of 3x224x224 float tensors
(no other work), batch 128 (77 MB), collation timed by a wrapper with num_workers=0 and with workers; then
lotus.profile.shmprobe on the same bytes. The difference of the first two is what the probe stands for
(docs/model.md, "From a num_workers=0 trace to workers").

    python benchmarks/shm_collate.py [--batches 40] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate


class Images(Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((3, 224, 224), float(i % 7)), i


def timed(batch):
    t = time.perf_counter()
    out = default_collate(batch)
    out.append(torch.tensor(time.perf_counter() - t))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    ms = {}
    for nw in (0, a.workers):
        dl = DataLoader(Images(a.batch_size * a.batches), batch_size=a.batch_size, num_workers=nw, collate_fn=timed)
        ts = [float(b[2]) for b in dl][2:]  # the first batches: allocator and workers warming up
        ms[nw] = 1e3 * statistics.median(ts)
        print(f"num_workers={nw}: collation median {ms[nw]:.1f} ms ({len(ts)} batches)")
    nbytes = a.batch_size * (3 * 224 * 224 * 4 + 8)
    from lotus.profile.shmprobe import measure

    c = measure(nbytes)
    print(f"torch: a worker's collation +{ms[a.workers] - ms[0]:.1f} ms; lotus.profile.shmprobe for "
          f"{nbytes / 1e6:.0f} MB: +{c.shared_ms - c.private_ms:.1f} ms (shared {c.shared_ms:.1f}, private "
          f"{c.private_ms:.1f}), first touch {c.touch_ms:.1f} ms" if c else "shared memory could not be probed here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
