"""Picklable datasets for the DataLoader tests (module level, so spawn/forkserver workers import them)."""

from __future__ import annotations

import math
import os
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torchvision import transforms as T


class AddNoise:
    """A random op drawing from torch's RNG (so worker seeding must match torch exactly)."""

    def __call__(self, x):
        return x + torch.rand_like(x)


def double(x):
    return x * 2


class MapDS(Dataset):
    """Items (tensor, label) through a torchvision Compose with random and deterministic ops."""

    def __init__(self, n: int = 40, size: int = 8, fail_at: int | None = None, sleep_s: float = 0.0):
        self.n = n
        self.size = size
        self.fail_at = fail_at
        self.sleep_s = sleep_s
        self.transform = T.Compose([T.RandomHorizontalFlip(), AddNoise(), T.Normalize([0.5], [0.25]), double])
        self.target_transform = None
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if self.fail_at is not None and i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.calls += 1
        x = torch.arange(self.size * self.size, dtype=torch.float32).reshape(1, self.size, self.size) + i
        return self.transform(x), i % 3


class DictDS(Dataset):
    """Dict samples and plain callables as transforms."""

    def __init__(self, n: int = 30):
        self.n = n
        self.transform = double

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return {"x": self.transform(torch.tensor([float(i), 1.0])), "id": i, "name": f"s{i}"}


class RangeIterable(IterableDataset):
    """IterableDataset sharded across workers the way torch's docs do it (worker_init_fn or __iter__)."""

    def __init__(self, start: int = 0, end: int = 37, shard_in_iter: bool = True):
        self.start = start
        self.end = end
        self.shard_in_iter = shard_in_iter
        self.transform = T.Compose([double])

    def __iter__(self):
        start, end = self.start, self.end
        info = get_worker_info()
        if self.shard_in_iter and info is not None:
            per = math.ceil((end - start) / info.num_workers)
            start = start + info.id * per
            end = min(start + per, self.end)
        for i in range(start, end):
            yield self.transform(torch.tensor([float(i)]))

    def __len__(self) -> int:
        return self.end - self.start


def shard_worker_init_fn(worker_id: int) -> None:
    """torch docs' pattern: reconfigure the worker's dataset copy through get_worker_info()."""
    info = get_worker_info()
    ds = info.dataset
    overall_start, overall_end = ds.start, ds.end
    per = math.ceil((overall_end - overall_start) / info.num_workers)
    ds.start = overall_start + worker_id * per
    ds.end = min(ds.start + per, overall_end)


def seed_env_worker_init_fn(worker_id: int) -> None:
    os.environ["LOTUS_TEST_WORKER"] = str(worker_id)


def sum_collate(batch):
    xs = torch.stack([b[0] for b in batch])
    return xs.sum(dim=0), [b[1] for b in batch]


class SlowDS(MapDS):
    def __init__(self, n: int = 8, sleep_s: float = 3.0):
        super().__init__(n=n, sleep_s=sleep_s)


class SkewedDS(Dataset):
    """Some samples are much slower than others (heavy tail), to make workers finish out of order."""

    def __init__(self, n: int = 48, slow: tuple[int, ...] = (0, 1, 2, 3), slow_s: float = 0.4):
        self.n = n
        self.slow = set(slow)
        self.slow_s = slow_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        time.sleep(self.slow_s if i in self.slow else 0.002)
        return {"id": i}


class SlowAtDS(MapDS):
    """One sample (``slow_at``) takes ``slow_s`` seconds; the others are instant."""

    def __init__(self, n: int = 64, slow_at: int = 0, slow_s: float = 3.0):
        super().__init__(n=n)
        self.slow_at = slow_at
        self.slow_s_at = slow_s

    def __getitem__(self, i):
        if i == self.slow_at:
            time.sleep(self.slow_s_at)
        return super().__getitem__(i)


class SpinDS(Dataset):
    """``n`` items each costing ``ms`` milliseconds of thread CPU time (a spin) and ``sleep_ms`` of sleep."""

    def __init__(self, n: int = 64, ms: float = 2.0, sleep_ms: float = 0.0):
        self.n, self.ms, self.sleep_ms = n, ms, sleep_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        end = time.thread_time_ns() + int(self.ms * 1e6)
        while time.thread_time_ns() < end:
            pass
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1e3)
        return torch.full((4,), float(i))
