"""A data-parallel (DDP, gloo) training job on CPUs with one straggler rank, for ``lotus analyze ranks``.

Run it as ``lotus run -- torchrun --standalone --nproc-per-node 2 ddp_straggler.py --slow-rank 1 --slow input``:
``--slow input`` slows the slow rank's samples (its DataLoader cannot keep up: it waits for data and the
others wait for it in the all-reduce); ``--slow step`` adds work after the optimizer step on that rank
(logging, a checkpoint: its next step starts late). The other ranks are identical. Knows nothing of lotus.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow", choices=["input", "step"], default="input")
p.add_argument("--samples", type=int, default=768)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--item-s", type=float, default=0.0005)  # preparing a sample (a decode)
p.add_argument("--slow-item-s", type=float, default=0.006)  # ... on the slow rank with --slow input
p.add_argument("--step-s", type=float, default=0.010)  # the step's compute besides the model
p.add_argument("--slow-step-s", type=float, default=0.025)  # more after the step on the slow rank (--slow step)
a = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
slow = rank == a.slow_rank


class Samples(Dataset):
    def __len__(self):
        return a.samples

    def __getitem__(self, i):
        time.sleep(a.slow_item_s if slow and a.slow == "input" else a.item_s)
        return torch.full((16,), float(i % 7)), i % 2


torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ds = Samples()
sampler = DistributedSampler(ds, shuffle=False)
loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2)
for epoch in range(a.epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        time.sleep(a.step_s)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # the all-reduce: every rank waits here for the last one
        opt.step()
        opt.zero_grad()
        if slow and a.slow == "step":
            time.sleep(a.slow_step_s)
dist.barrier()
dist.destroy_process_group()
