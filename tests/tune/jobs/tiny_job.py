"""A tiny training-like job knowing nothing of lotus: each item costs CPU, each step a fixed time.

``--crash-if-forced``: exit 3 when lotus forced num_workers (every tuning probe but the baseline fails).
"""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Busy(Dataset):
    def __init__(self, n: int, item_ms: float):
        self.n, self.item_ms = n, item_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = time.perf_counter() + self.item_ms / 1e3
        while time.perf_counter() < t:
            pass
        return torch.full((16,), float(i))


p = argparse.ArgumentParser()
p.add_argument("--items", type=int, default=64)
p.add_argument("--item-ms", type=float, default=2.0)
p.add_argument("--step-ms", type=float, default=3.0)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--epochs", type=int, default=100)
p.add_argument("--crash-if-forced", action="store_true")
p.add_argument("--no-loader", action="store_true")
a = p.parse_args()
if a.no_loader:
    print("no DataLoader here")
    sys.exit(0)
torch.set_num_threads(1)
loader = DataLoader(Busy(a.items, a.item_ms), batch_size=4, num_workers=a.workers, shuffle=True)
if a.crash_if_forced and os.environ.get("LOTUS_WORKERS"):
    print(f"tiny_job: refusing num_workers={loader.num_workers}", file=sys.stderr)
    sys.exit(3)
for _ in range(a.epochs):
    for _batch in loader:
        t = time.perf_counter() + a.step_ms / 1e3
        while time.perf_counter() < t:
            pass
