"""A tiny regression problem shared by the framework examples (no downloads, CPU or GPU)."""

import time

import torch
from torch.utils.data import Dataset


class Squares(Dataset):
    """x -> sum(x^2), with a little CPU work per item (so loading is visible in the trace)."""

    def __init__(self, n: int = 512, dim: int = 16, work_s: float = 0.001):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.work_s = work_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        if self.work_s:
            time.sleep(self.work_s)
        x = self.x[i]
        return x, (x * x).sum().reshape(1)


def model(dim: int = 16) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
