"""A training script that knows nothing of lotus (driven by tests/launch)."""

import argparse
import hashlib
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class DS(Dataset):
    def __init__(self, n, sleep_s):
        self.n = n
        self.sleep_s = sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        cpu = sorted(os.sched_getaffinity(0))[0] if hasattr(os, "sched_getaffinity") else 0
        return torch.full((4,), float(i)), cpu, int("torchvision" in sys.modules)


p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=64)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--persistent", action="store_true")
p.add_argument("--exit", type=int, default=0)
p.add_argument("--crash-at", type=int, default=-1)
p.add_argument("--swallow-exit", action="store_true")
p.add_argument("--out", default=None)
a = p.parse_args()
kw = {"persistent_workers": True, "prefetch_factor": 3} if a.persistent and a.workers else {}
loader = DataLoader(DS(a.n, a.sleep), batch_size=4, num_workers=a.workers, shuffle=True,
                    generator=torch.Generator().manual_seed(0), **kw)
digest = hashlib.sha256()
info = {"class": f"{type(loader).__module__}.{type(loader).__qualname__}", "batches": 0,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "worker_cpus": set()}
step = 0
try:
    for _ in range(a.epochs):
        it = iter(loader)
        while True:
            try:
                x, cpu, tv = next(it)
            except StopIteration:
                break
            except SystemExit:
                if a.swallow_exit:  # a script that ignores the end of a probe: the launcher must stop it
                    time.sleep(3600)
                raise
            digest.update(x.numpy().tobytes())
            info["worker_cpus"].update(int(c) for c in cpu)
            info["torchvision_in_workers"] = info.get("torchvision_in_workers", 0) + int(tv.sum())
            info["batches"] += 1
            if step == a.crash_at:
                raise RuntimeError("the job crashed")
            step += 1
finally:
    info["digest"] = digest.hexdigest()
    info["worker_cpus"] = sorted(info["worker_cpus"])
    info["torchvision_in_main"] = "torchvision" in sys.modules
    if a.out:
        with open(a.out, "w") as f:
            json.dump(info, f)
sys.exit(a.exit)
