"""A CPU-bound training loop of known work that measures itself (driven by benchmarks/sink_overhead.py).

overhead_pairs.py's text pipeline (tokenizer-like, tens of us a sample), num_workers=0, so every batch is
prepared on the training thread: ``time.thread_time_ns()`` around each ``next()`` is that batch's CPU time
in the training process, tracer included. Knows nothing of lotus (``lotus run`` traces it). Writes to
``--out`` the median per-batch CPU and wall ns after ``--warmup`` batches, and the loop's seconds.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from overhead_pairs import _Text
from torch.utils.data import DataLoader

p = argparse.ArgumentParser()
p.add_argument("--batches", type=int, default=12000)
p.add_argument("--warmup", type=int, default=500)
p.add_argument("--out", required=True)
p.add_argument("--record", default=None, help="also save every batch's (end monotonic ns, CPU ns), .npy")
a = p.parse_args()
ds = _Text(512)
loader = DataLoader(ds, batch_size=8, shuffle=False)
cpu, wall, ends = [], [], []
for _ in loader:
    pass  # one epoch to warm up
t_start = time.monotonic()
while len(cpu) < a.batches:  # epochs of 64 batches
    it = iter(loader)
    while len(cpu) < a.batches:
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            next(it)
        except StopIteration:
            break
        cpu.append(time.thread_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
        ends.append(time.monotonic_ns())
with open(a.out, "w") as f:
    json.dump({"cpu_ns": statistics.median(cpu[a.warmup:]), "wall_ns": statistics.median(wall[a.warmup:]),
               "mean_wall_ns": statistics.fmean(wall[a.warmup:]), "batches": len(cpu),
               "loop_s": time.monotonic() - t_start}, f)
if a.record:
    import numpy as np

    np.save(a.record, np.array([ends, cpu], dtype=np.int64))
