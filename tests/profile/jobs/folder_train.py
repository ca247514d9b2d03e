"""A training-like job over an ImageFolder of JPEGs, knowing nothing of lotus (driven by tests/profile)."""

import argparse
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms as T

p = argparse.ArgumentParser()
p.add_argument("data")
p.add_argument("--workers", type=int, default=1)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--step-ms", type=float, default=10.0)
p.add_argument("--epochs", type=int, default=100)
a = p.parse_args()
torch.set_num_threads(1)
ds = torchvision.datasets.ImageFolder(a.data, transform=T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))
loader = DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers, shuffle=True)
for _ in range(a.epochs):
    for _batch in loader:
        t = time.perf_counter() + a.step_ms / 1e3
        while time.perf_counter() < t:  # the "model": a fixed amount of work per step
            pass
