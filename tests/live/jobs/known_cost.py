"""A job of known cost that times its own steady state (the truth the live sinks are checked against).

Each sample sleeps ``--sleep`` seconds in a worker; the loop takes ``--step`` seconds per batch. The job
records when each batch reaches the loop and writes, to ``--out``, its steady samples/s: from the hand-off
of the prefetched ramp's last batch (num_workers x prefetch_factor) to the last hand-off, as lotus's one
measure defines the steady state. Plain torch unless ``--lotus-sinks JSON`` (lotus's DataLoader with
``live_sinks=``). ``--wandb``: the job opens a W&B run of its own first (as a training script would).
"""

import argparse
import json
import time

import torch
from torch.utils.data import Dataset


class Sleepy(Dataset):
    def __init__(self, n, sleep_s):
        self.n, self.sleep_s = n, sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep_s)
        return torch.full((4,), float(i))


p = argparse.ArgumentParser()
p.add_argument("--batches", type=int, default=200)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--workers", type=int, default=2)
p.add_argument("--sleep", type=float, default=0.005)
p.add_argument("--step", type=float, default=0.002)
p.add_argument("--out", required=True)
p.add_argument("--exit", type=int, default=0)
p.add_argument("--wandb", action="store_true")
p.add_argument("--lotus-sinks", default=None, help="JSON of live_sinks= (lotus's DataLoader, trace in --trace-dir)")
p.add_argument("--trace-dir", default=None)
a = p.parse_args()
run = None
if a.wandb:
    import wandb

    run = wandb.init(project="lotus-test-job", settings=wandb.Settings(console="off", x_disable_stats=True))
    run.log({"job/started": 1})
kw = {}
if a.lotus_sinks is not None:
    from lotus.dataloader import DataLoader

    kw = {"trace_dir": a.trace_dir, "live_sinks": json.loads(a.lotus_sinks)}
else:
    from torch.utils.data import DataLoader
loader = DataLoader(Sleepy(a.batches * a.batch_size, a.sleep), batch_size=a.batch_size, num_workers=a.workers, **kw)
t = []
for _ in loader:
    t.append(time.monotonic_ns())
    time.sleep(a.step)
ramp = max(a.workers * 2, 1)
steady = (len(t) - ramp) * a.batch_size / ((t[-1] - t[ramp - 1]) / 1e9)
with open(a.out, "w") as f:
    json.dump({"samples_per_s": steady, "batches": len(t), "wandb_run_id": run.id if run else None}, f)
if run is not None:
    run.finish()
raise SystemExit(a.exit)
