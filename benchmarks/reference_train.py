"""The reference job: a plain torch/torchvision training script that times its own steady state.

No lotus import (lotus may trace it from outside with `lotus run`): this script's clock is the truth
that lotus's probes, predictions and measures are checked against (issue 15). It times every hand-off
of its DataLoader with time.perf_counter_ns() and reports, after the prefetched ramp (num_workers x
prefetch_factor batches, 1 without workers), the samples per second, its own 95% interval (batch means
over 10 consecutive blocks), and the share of the loop's time spent waiting in next().

    python benchmarks/reference_train.py DATA -a resnet18 -b 128 -j 15 --bf16 --seconds 20 --json out.json
    python benchmarks/reference_train.py --synthetic 8 -b 16 -j 2 --seconds 10    # 8 ms CPU per sample, no GPU
    python benchmarks/reference_train.py --files /tmp/f --make-files 8192 256 --synthetic 1 -a none -b 16 -j 2

DATA is an ImageFolder root (class folders or a train/ folder of them). ``--synthetic MS`` replaces it by
a dataset whose samples cost MS milliseconds of CPU each (a spin loop), for machines without images or
GPUs. The run ends after ``--seconds`` of steady state (or ``--max-batches``), at an epoch end or not.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class Spin(Dataset):
    """``n`` samples, each costing ``ms`` milliseconds of CPU (thread time) and a 3 x hw x hw tensor; with
    ``jitter`` > 0 the cost is ``ms`` times a log-normal factor of mean 1 (sigma ``jitter``, seeded by the
    sample index: the same sample costs the same in every epoch and run)."""

    def __init__(self, n: int, ms: float, jitter: float = 0.0, hw: int = 32):
        self.n, self.ms, self.jitter, self.hw = n, ms, jitter, hw

    def __len__(self):
        return self.n

    def cost_ms(self, i: int) -> float:
        if not self.jitter:
            return self.ms
        import random

        z = random.Random(i).gauss(0.0, 1.0)
        return self.ms * math.exp(self.jitter * z - self.jitter ** 2 / 2)

    def __getitem__(self, i):
        end = time.thread_time_ns() + int(self.cost_ms(i) * 1e6)
        x = 0
        while time.thread_time_ns() < end:
            x += 1
        return torch.full((3, self.hw, self.hw), float(i % 7)), i % 10


class Files(Dataset):
    """One sample a file of ``root`` (sorted names): its bytes read whole (``open``/``read``), then ``ms``
    milliseconds of CPU (thread time) and a 3x32x32 tensor of its first bytes: an I/O-bound job where the disk
    is slower than the workers (``benchmarks/slowdisk.sh`` gives a machine such a disk and a page-cache
    budget). ``files`` is the attribute lotus lists the dataset's files from (its cache probes evict them)."""

    def __init__(self, root: Path, ms: float = 0.0):
        self.files = sorted(str(f) for f in Path(root).iterdir() if f.is_file())
        if not self.files:
            raise SystemExit(f"{root}: no files")
        self.ms = ms

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            b = f.read()
        end = time.thread_time_ns() + int(self.ms * 1e6)
        while time.thread_time_ns() < end:
            pass
        head = torch.frombuffer(bytearray(b[:3072].ljust(3072, b"\0")), dtype=torch.uint8)
        return head.view(3, 32, 32).float(), i % 10


def make_files(root: Path, count: int, kib: int) -> None:
    """``count`` files of ``kib`` KiB under ``root`` (kept when already there): each its index repeated (no
    file system here compresses or shares blocks, and a pattern writes faster than random bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        f = root / f"{i:07d}.bin"
        if not f.exists() or f.stat().st_size != kib * 1024:
            f.write_bytes(i.to_bytes(8, "little") * (kib * 128))


def image_folder(root: Path):
    import torchvision
    from torchvision import transforms as T

    train = root / "train" if (root / "train").is_dir() else root
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return torchvision.datasets.ImageFolder(str(train), tf)


def steady(t_ns: list[int], n: list[int], ramp: int, blocks: int = 10) -> dict:
    """Samples/s after the ramp and a batch-means 95% interval (t quantile over 10 blocks, on the log of the
    blocks' rates: asymmetric, never below 0; this script's own)."""
    if len(t_ns) < ramp + 2:
        return {"samples_per_s": None, "ci95": None, "batches": max(len(t_ns) - ramp, 0)}
    t, s = t_ns[ramp - 1:], n[ramp:]
    rate = sum(s) / ((t[-1] - t[0]) / 1e9)
    size = len(s) // blocks
    ci = None
    if size >= 1:
        rates = []
        for b in range(blocks):
            lo, hi = b * size, (b + 1) * size if b < blocks - 1 else len(s)
            rates.append(sum(s[lo:hi]) / ((t[hi] - t[lo]) / 1e9))
        # on the log of the blocks' rates: a rate's interval stays above 0 however bursty the blocks (on the
        # rates themselves a 32-worker ResNet-18 run on 16 CPUs read 1,708 [-417, 3,834] samples/s)
        logs = [math.log(r) for r in rates]
        mean = sum(logs) / blocks
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (blocks - 1))
        hw = 2.262 * sd / math.sqrt(blocks)  # t(0.975, 9)
        ci = [rate * math.exp(-hw), rate * math.exp(hw)]
    return {"samples_per_s": rate, "ci95": ci, "batches": len(s), "window_s": (t[-1] - t[0]) / 1e9}


def whole_epochs(t_ns: list[int], n: list[int], ramp: int, ends: list[int]) -> dict:
    """Samples/s over the whole epochs after the ramp: from the last batch of the epoch in which the ramp ended
    to the last batch of the last epoch, so that each epoch in it is counted with its restart (the wait for its
    first batches), once. A window of a fixed time instead ends where a long wait straddles its end (the run stops
    at the batch that took it past its seconds): with 64-batch epochs whole-dispatched to 32 workers, its rate read
    794-917 samples/s where whole epochs of the same job gave 1,000 (issue 24, gpu-h200/issue-24/oversub-32/).
    The 95% interval is over the epochs' own rates (t quantile, on their logs) with 3 or more of them. A run of
    no whole epoch after the ramp's keeps the window's rate (no restart inside it)."""
    ends = [e for e in ends if e >= ramp - 1]
    if len(ends) < 2:  # no whole epoch after the ramp's (one long epoch): no restart in the window, its rate stays
        return {"epochs_counted": 0}
    rates = [sum(n[a + 1: b + 1]) / ((t_ns[b] - t_ns[a]) / 1e9) for a, b in itertools.pairwise(ends)]
    total = sum(n[ends[0] + 1: ends[-1] + 1]) / ((t_ns[ends[-1]] - t_ns[ends[0]]) / 1e9)
    ci = None
    if len(rates) >= 3:
        logs = [math.log(r) for r in rates]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        t975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}.get(len(logs) - 1, 2.0)
        hw = t975 * sd / math.sqrt(len(logs))
        ci = [total * math.exp(-hw), total * math.exp(hw)]
    return {"samples_per_s": total, "ci95": ci, "epochs_counted": len(rates), "epoch_rates": rates,
            "batches": ends[-1] - ends[0], "window_s": (t_ns[ends[-1]] - t_ns[ends[0]]) / 1e9}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", type=Path)
    p.add_argument("--synthetic", type=float, default=None, metavar="MS", help="CPU ms per sample instead of DATA")
    p.add_argument("--samples", type=int, default=8192, help="dataset size with --synthetic")
    p.add_argument("--files", type=Path, default=None, metavar="DIR",
                   help="one sample a file of DIR, read whole (+ --synthetic MS of CPU each): I/O-bound")
    p.add_argument("--make-files", type=int, nargs=2, default=None, metavar=("COUNT", "KIB"),
                   help="with --files: first create COUNT files of KIB KiB there (kept when present)")
    p.add_argument("--jitter", type=float, default=0.0, metavar="SIGMA",
                   help="with --synthetic: log-normal spread of the per-sample cost (mean kept)")
    p.add_argument("--sample-hw", type=int, default=32, metavar="PX",
                   help="with --synthetic: each sample a 3xPXxPX float tensor (224: an ImageNet crop's bytes)")
    p.add_argument("-a", "--arch", default="resnet18", help="torchvision model, or 'none' (no model step)")
    p.add_argument("-b", "--batch-size", type=int, default=128)
    p.add_argument("-j", "--workers", type=int, default=4)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--bf16", action="store_true", help="autocast to bfloat16 on CUDA")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--step-ms", type=float, default=0.0, help="with -a none: a busy step of this many ms")
    p.add_argument("--seconds", type=float, default=20.0, help="stop after this many seconds of steady state")
    p.add_argument("--max-batches", type=int, default=100000)
    p.add_argument("--whole-epochs", action="store_true",
                   help="run on past --seconds to the end of the epoch in progress (and through one epoch after "
                        "the ramp's; at most 16 x --seconds) and give the rate over whole epochs after the ramp "
                        "(each with its restart): see whole_epochs()")
    p.add_argument("--json", type=Path, default=None, help="write the result here (also printed)")
    a = p.parse_args(argv)
    if a.synthetic is None and a.data is None and a.files is None:
        p.error("give DATA, --files DIR or --synthetic MS")
    if a.files is not None:
        if a.make_files:
            make_files(a.files, *a.make_files)
        ds = Files(a.files, a.synthetic or 0.0)
    else:
        ds = Spin(a.samples, a.synthetic, a.jitter, a.sample_hw) if a.synthetic is not None else image_folder(a.data)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = None
    if a.arch != "none":
        import torchvision

        model = getattr(torchvision.models, a.arch)(num_classes=1000).to(dev)
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
    kw = {"prefetch_factor": a.prefetch_factor, "persistent_workers": a.persistent_workers} if a.workers else {}
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers, pin_memory=a.pin_memory,
                        drop_last=True, **kw)
    ramp = max(a.workers * a.prefetch_factor, 1) if a.workers else 1
    t_ns, n, wait_ns, loop_t0 = [], [], 0, None
    steady_t0, ramp_epoch = None, 0
    done = False
    ends = []  # the index in t_ns of each epoch's last batch
    epochs = 0
    while not done:
        it = iter(loader)
        epochs += 1
        while True:
            w0 = time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                break
            w1 = time.perf_counter_ns()
            t_ns.append(w1)
            n.append(len(y))
            if len(t_ns) == ramp:
                steady_t0, loop_t0, ramp_epoch = w1, w1, epochs
            elif len(t_ns) > ramp:
                wait_ns += w1 - w0
            if model is not None:
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
                if a.channels_last:
                    x = x.to(memory_format=torch.channels_last)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16 and dev.type == "cuda"):
                    loss = loss_fn(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if dev.type == "cuda":
                    torch.cuda.synchronize()  # the step is done when the loop asks again (a real loop syncs on .item())
            elif a.step_ms:
                end = time.perf_counter_ns() + int(a.step_ms * 1e6)
                while time.perf_counter_ns() < end:
                    pass
            # the batch is released inside the step, not in the next wait: freeing a batch's shared memory
            # (~0.45 ms for 256 samples of 3x32x32 on the 2-core VM) is the loop's work, not a wait for data
            del x, y
            past = time.perf_counter_ns() - steady_t0 if steady_t0 is not None else -1
            if steady_t0 is not None and (past >= a.seconds * 1e9 or len(t_ns) >= a.max_batches):
                if not a.whole_epochs or len(t_ns) >= a.max_batches or past >= 16 * a.seconds * 1e9:
                    done = True
                    break
                # whole epochs: the epoch in progress runs to its end, and one more after the ramp's epoch
                # (else no whole epoch is counted: a slow setting whose first epoch outlasts --seconds)
                done = done or epochs > ramp_epoch
        del it
        ends.append(len(t_ns) - 1)
    loop_s = (t_ns[-1] - loop_t0) / 1e9 if loop_t0 is not None and len(t_ns) > ramp else None
    out = {"arch": a.arch, "batch_size": a.batch_size, "workers": a.workers, "prefetch_factor": a.prefetch_factor,
           "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
           "device": dev.type, "epochs": epochs, "ramp_batches": ramp, "batches_total": len(t_ns),
           **steady(t_ns, n, ramp), "wait_share": (wait_ns / 1e9 / loop_s) if loop_s else None}
    if a.whole_epochs:  # the window's rate kept beside it; the truth is the whole epochs'
        out.update(window_samples_per_s=out["samples_per_s"], window_ci95=out["ci95"],
                   **whole_epochs(t_ns, n, ramp, ends))
    text = json.dumps(out)
    print(text, flush=True)
    if a.json is not None:
        a.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
