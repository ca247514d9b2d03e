"""A tiny training-like job for tests/submit: a torch DataLoader over a sleepy dataset (traced by lotus.launch).

    python tiny_job.py [--n 64] [--batch 4] [--workers 1] [--sleep 0.005] [--step 0.0] [--exit N] [--forever]
"""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Sleepy(Dataset):
    def __init__(self, n: int, sleep_s: float):
        self.n, self.sleep_s = n, sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((8,), float(i))


p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=64)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--sleep", type=float, default=0.005, help="seconds per sample in a worker")
p.add_argument("--step", type=float, default=0.0, help="seconds per step in the loop")
p.add_argument("--exit", type=int, default=0)
p.add_argument("--forever", action="store_true", help="epochs until stopped")
a = p.parse_args()
if a.exit:
    print(f"tiny_job: failing on purpose with exit code {a.exit}", file=sys.stderr)
    sys.exit(a.exit)
loader = DataLoader(Sleepy(a.n, a.sleep), batch_size=a.batch, num_workers=a.workers)
epochs = 0
while True:
    for _ in loader:
        if a.step:
            time.sleep(a.step)
    epochs += 1
    if not a.forever:
        break
print(f"tiny_job: done, {epochs} epoch(s), pid {os.getpid()}, Slurm job {os.environ.get('SLURM_JOB_ID', '-')}")
