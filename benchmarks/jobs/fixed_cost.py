"""A job with known costs: each sample burns --sample-ms of CPU in its worker, each step --step-ms in
the loop (busy-waiting, so it is CPU time, like decoding and a CPU-side step). Knows nothing of lotus."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


def burn(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class Fixed(Dataset):
    def __init__(self, n: int, sample_ms: float):
        self.n, self.sample_ms = n, sample_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        burn(self.sample_ms)
        return torch.tensor([i], dtype=torch.float32)


p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=100000)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--sample-ms", type=float, default=3.0)
p.add_argument("--step-ms", type=float, default=10.0)
a = p.parse_args()
torch.set_num_threads(1)
for _batch in DataLoader(Fixed(a.n, a.sample_ms), batch_size=a.batch_size, num_workers=a.workers):
    burn(a.step_ms)
