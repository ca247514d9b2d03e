"""A job with known costs: each sample burns --sample-ms of CPU in its worker, each step --step-ms in
the loop (busy-waiting, so it is CPU time, like decoding and a CPU-side step). Knows nothing of lotus.

It prints its own clock (``OWNCLOCK N samples/s`` on stderr: the steady state after the ramp of
``num_workers x prefetch_factor`` batches) and fails on demand, for tests of probes that fail:
``--fail-min-workers N`` / ``--fail-workers N``: exit 7 ("simulated OOM") when the loader has N or more / N
workers; ``--fail-env VAR``: exit 9 when VAR is set (lotus's replay probe sets LOTUS_REPLAY).
"""

import argparse
import os
import sys
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
p.add_argument("--fail-min-workers", type=int, default=0)
p.add_argument("--fail-workers", type=int, default=-1)
p.add_argument("--fail-env", default="")
a = p.parse_args()
torch.set_num_threads(1)
dl = DataLoader(Fixed(a.n, a.sample_ms), batch_size=a.batch_size, num_workers=a.workers)
if dl.num_workers == a.fail_workers or (a.fail_min_workers > 0 and dl.num_workers >= a.fail_min_workers):
    print(f"job: simulated OOM with num_workers={dl.num_workers}", file=sys.stderr)
    sys.exit(7)
if a.fail_env and os.environ.get(a.fail_env):
    print(f"job: refusing to run under {a.fail_env}", file=sys.stderr)
    sys.exit(9)
ramp = max(dl.num_workers * (dl.prefetch_factor or 2), 1)
ts = []
for b in dl:
    ts.append((time.perf_counter(), b.shape[0]))
    burn(a.step_ms)
    if len(ts) > ramp + 1 and len(ts) % 50 == 0:  # the job's own clock, also when a probe stops it early
        n = sum(s for _, s in ts[ramp:])
        print(f"OWNCLOCK {n / (ts[-1][0] - ts[ramp - 1][0]):.1f} samples/s", file=sys.stderr, flush=True)
