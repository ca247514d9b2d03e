"""Train a torchvision model on an ImageFolder with the lotus DataLoader (single process or torchrun/DDP).

Flags follow the original Lotus study's script (pytorch/examples imagenet): -a, -b, -j, --epochs,
--train-loop (steps per epoch), plus lotus's: --trace-dir, --profile (torch.profiler/Kineto trace next
to the lotus trace), --telemetry (NVML), --worker-assignment, --delivery-order.

    python examples/train_imagenet.py DATA -a resnet18 -b 256 -j 8 --epochs 1 --train-loop 50 \\
        --trace-dir traces/b256_w8 --profile
    torchrun --nproc-per-node 2 examples/train_imagenet.py DATA -a resnet50 -b 128 -j 4 --trace-dir traces/ddp
    python examples/train_imagenet.py DATA --generate 2000 ...   # make a JPEG dataset first (lotus demo's)

DATA is an ImageFolder root (class folders, or a train/ folder holding them). Each rank writes its own
trace files (rank recorded in them); `lotus analyze ... --data-dir TRACE_DIR` merges the ranks.
Results (end-to-end time, images/s per rank) go to TRACE_DIR/run-r<rank>.json and --results CSV.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torchvision import transforms as T

from lotus.dataloader import DataLoader

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="ImageFolder root (class folders, or a train/ folder of them)")
    p.add_argument("-a", "--arch", default="resnet18", help="torchvision model name (default resnet18)")
    p.add_argument("-b", "--batch-size", type=int, default=256, help="per-process batch size")
    p.add_argument("-j", "--workers", type=int, default=4, help="DataLoader workers per process")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-loop", type=int, default=0, help="steps per epoch (0 = the whole epoch)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto")
    p.add_argument("--amp", action="store_true", help="bf16 autocast on CUDA")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--no-pin-memory", dest="pin_memory", action="store_false")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--prefetch-factor", type=int, default=None)
    p.add_argument("--trace-dir", type=Path, default=None, help="lotus trace directory (else $LOTUS_TRACE_DIR)")
    p.add_argument("--no-trace", action="store_true", help="run untraced (for overhead comparisons)")
    p.add_argument("--itt", action="store_true", help="ITT tasks for VTune")
    p.add_argument("--itt-resume", action="store_true",
                   help="resume VTune collection (ITT) just before the training loop and pause it after "
                        "(for vtune -start-paused)")
    p.add_argument("--telemetry", action="store_true", help="sample NVML GPU telemetry into the trace")
    p.add_argument("--worker-assignment", default=None, choices=["round_robin", "free_worker"])
    p.add_argument("--delivery-order", default=None, choices=["in_order", "lowest_ready_first", "arrival"])
    p.add_argument("--profile", action="store_true", help="torch.profiler (Kineto) trace into the trace dir")
    p.add_argument("--profile-skip", type=int, default=5, help="steps before the profiled window")
    p.add_argument("--profile-steps", type=int, default=20, help="steps profiled")
    p.add_argument("--generate", type=int, default=0, help="first generate N JPEGs into DATA (lotus demo's)")
    p.add_argument("--results", type=Path, default=None, help="append one CSV row of results here")
    p.add_argument("--print-freq", type=int, default=10)
    return p.parse_args(argv)


def setup_distributed(device_arg: str) -> tuple[int, int, torch.device]:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and device_arg != "cpu"
    if device_arg not in ("auto", "cuda", "cpu"):
        device = torch.device(device_arg)
    else:
        device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world, device


def image_folder(root: Path, size: int):
    train = root / "train" if (root / "train").is_dir() else root
    return torchvision.datasets.ImageFolder(str(train), transform=T.Compose([
        T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]))


def make_profiler(args, trace_dir: Path | None, rank: int, device: torch.device):
    if not args.profile:
        return contextlib.nullcontext(None)
    from torch.profiler import ProfilerActivity, profile, schedule

    out = trace_dir or Path(".")
    out.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])

    def on_ready(prof):
        prof.export_chrome_trace(str(out / f"kineto-r{rank}.pt.trace.json"))

    return profile(activities=activities, on_trace_ready=on_ready,
                   schedule=schedule(wait=max(args.profile_skip - 1, 0), warmup=1, active=args.profile_steps,
                                     repeat=1))


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world, device = setup_distributed(args.device)
    if args.generate and rank == 0:
        from lotus.demo.dataset import DatasetSpec, generate_image_folder

        generate_image_folder(args.data, DatasetSpec(images=args.generate, seed=args.seed),
                              workers=min(os.cpu_count() or 1, 16))
    if world > 1:
        dist.barrier()
    torch.manual_seed(args.seed)
    dataset = image_folder(args.data, args.image_size)
    sampler = torch.utils.data.DistributedSampler(dataset, seed=args.seed) if world > 1 else None
    trace_dir = None if args.no_trace else (args.trace_dir or (Path(os.environ["LOTUS_TRACE_DIR"])
                                                               if os.environ.get("LOTUS_TRACE_DIR") else None))
    if args.no_trace:
        os.environ.pop("LOTUS_TRACE_DIR", None)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler, num_workers=args.workers,
        pin_memory=args.pin_memory and device.type == "cuda", drop_last=True,
        persistent_workers=args.persistent_workers and args.workers > 0, prefetch_factor=args.prefetch_factor,
        trace_dir=trace_dir, itt=args.itt or None, trace_name="train", gpu_telemetry=args.telemetry or None,
        worker_assignment=args.worker_assignment, delivery_order=args.delivery_order,
    )
    model = getattr(torchvision.models, args.arch)(num_classes=len(dataset.classes)).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                          else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.amp and device.type == "cuda"
                else contextlib.nullcontext())
    steps = images = 0
    itt = None
    if args.itt_resume:
        import ittapi

        itt = ittapi
        itt.resume()
    t_start = time.perf_counter()
    with make_profiler(args, trace_dir, rank, device) as prof:
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            t_epoch = time.perf_counter()
            for i, (x, y) in enumerate(loader):
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
                if args.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                with autocast:
                    loss = loss_fn(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                steps += 1
                images += x.shape[0]
                if prof is not None:
                    prof.step()
                if rank == 0 and args.print_freq and (i + 1) % args.print_freq == 0:
                    print(f"epoch {epoch} step {i + 1}: loss {loss.item():.3f}", file=sys.stderr, flush=True)
                if args.train_loop and i + 1 >= args.train_loop:
                    break
            if rank == 0:
                print(f"epoch {epoch}: {time.perf_counter() - t_epoch:.2f} s", file=sys.stderr, flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if itt is not None:
        itt.pause()
    elapsed = time.perf_counter() - t_start
    del loader  # joins the workers, so their CPU time is counted below
    import gc
    import resource

    gc.collect()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"rank": rank, "world_size": world, "arch": args.arch, "batch_size": args.batch_size,
              "workers": args.workers, "device": str(device), "traced": trace_dir is not None,
              "steps": steps, "images": images, "seconds": round(elapsed, 3),
              "images_per_s": round(images / elapsed, 2) if elapsed else 0.0,
              "worker_assignment": args.worker_assignment or "round_robin",
              "delivery_order": args.delivery_order or "in_order", "torch": torch.__version__,
              "cpu_main_s": round(own.ru_utime + own.ru_stime, 3),
              "cpu_workers_s": round(kids.ru_utime + kids.ru_stime, 3)}
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        (Path(trace_dir) / f"run-r{rank}.json").write_text(json.dumps(result, indent=2))
    if args.results is not None:
        new = not args.results.exists()
        with open(args.results, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(result))
            if new:
                w.writeheader()
            w.writerow(result)
    print(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
