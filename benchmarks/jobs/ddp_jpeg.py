"""A data-parallel (DDP) image-training job with one straggler rank made on purpose, for validating
``lotus analyze ranks`` on a real host (issue 26, item 3). Knows nothing of lotus.

Each rank decodes JPEGs (``ImageFolder``, RandomResizedCrop + flip + ToTensor + Normalize) in its own
DataLoader workers, pinned to its own CPUs, and trains a torchvision model on its GPU (ranks share a GPU when
there are fewer GPUs than ranks; the collective is then gloo's, on CUDA tensors) or on CPU. The straggler:

* ``--slow cpus``: the slow rank's process and workers get ``--slow-cpus`` of its CPUs (fewer CPUs on purpose);
* ``--slow transform``: its samples take ``--slow-ms`` more (a slower transform);
* ``--slow step``: ``--slow-ms`` more after its optimizer step (logging, a checkpoint);
* ``--slow none``: the control.

The job's own clock, beside what lotus reads: per rank, the time its loop waited in ``next()`` for a batch and
the time between the first and the last batch after each epoch's first (``--out DIR``: ``rank<R>.json``).

    torchrun --standalone --nproc-per-node 2 ddp_jpeg.py --data JPEGS --slow-rank 1 --slow cpus --out truth/
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset
from torchvision import transforms as T

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--images", type=int, default=4096, help="the first N images of the folder")
p.add_argument("--arch", default="resnet18")
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--workers", type=int, default=5)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--cpus-per-rank", type=int, default=0, help="0: the CPUs this job may use, split evenly")
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow", choices=["none", "cpus", "transform", "step"], default="none")
p.add_argument("--slow-cpus", type=int, default=2)
p.add_argument("--slow-ms", type=float, default=30.0)
p.add_argument("--out", default="")
a = p.parse_args()

backend_gpu = torch.cuda.is_available()
local = int(os.environ.get("LOCAL_RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
shared_gpu = backend_gpu and torch.cuda.device_count() < world
dist.init_process_group("nccl" if backend_gpu and not shared_gpu else "gloo")
rank = dist.get_rank()
slow = rank == a.slow_rank

allowed = sorted(os.sched_getaffinity(0))
per = a.cpus_per_rank or max(1, len(allowed) // world)
mine = allowed[(local * per) % len(allowed):][:per] or allowed
if slow and a.slow == "cpus":
    mine = mine[:a.slow_cpus]
os.sched_setaffinity(0, mine)  # the workers forked below inherit it

device = torch.device(f"cuda:{local % torch.cuda.device_count()}") if backend_gpu else torch.device("cpu")
if backend_gpu:
    torch.cuda.set_device(device)


class Slower:
    def __init__(self, ms):
        self.s = ms / 1000

    def __call__(self, x):
        time.sleep(self.s)
        return x


steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
         T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
if slow and a.slow == "transform":
    steps.append(Slower(a.slow_ms))
folder = torchvision.datasets.ImageFolder(a.data, T.Compose(steps))
ds = Subset(folder, range(min(a.images, len(folder))))
sampler = DistributedSampler(ds, shuffle=True, seed=0)
loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                    pin_memory=backend_gpu, persistent_workers=a.workers > 0, drop_last=True)
model = getattr(torchvision.models, a.arch)(num_classes=len(folder.classes)).to(device)
if backend_gpu:
    model = model.to(memory_format=torch.channels_last)
model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

wait_s = loop_s = 0.0
batches = 0
for epoch in range(a.epochs):
    sampler.set_epoch(epoch)
    it = iter(loader)
    first = True
    t_prev = None
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        if not first:  # each epoch's first batch (workers starting, prefetch filling) is left out
            wait_s += t1 - t0
            loop_s += t1 - t_prev
            batches += 1
        first = False
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=backend_gpu):
            loss = torch.nn.functional.cross_entropy(
                model(x.to(memory_format=torch.channels_last) if backend_gpu else x), y)
        loss.backward()  # the all-reduce: every rank waits here for the last one
        opt.step()
        opt.zero_grad(set_to_none=True)
        if backend_gpu:
            torch.cuda.synchronize()
        if slow and a.slow == "step":
            time.sleep(a.slow_ms / 1000)
        t_prev = t1
dist.barrier()
if a.out:
    Path(a.out).mkdir(parents=True, exist_ok=True)
    Path(a.out, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "slow": a.slow if slow else "none", "cpus": mine, "batches": batches,
        "samples_per_s": batches * a.batch_size / loop_s if loop_s else None,
        "wait_share": wait_s / loop_s if loop_s else None, "wait_s": wait_s, "loop_s": loop_s,
        "backend": dist.get_backend(), "device": str(device)}))
dist.destroy_process_group()
