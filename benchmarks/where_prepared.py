"""What one sample's preparation costs depending on WHERE it runs (issue 24: whatif from a num_workers=0 trace).

A num_workers=0 trace times each sample in the training loop's thread, with torch's intra-op threads beside it;
predicting workers reuses those times in worker processes (one intra-op thread each, several at once). On the
GPU host that read +31% / +40% / +52% high at 2 / 4 / 8 workers (docs/results/gpu-h200/issue-24/nw0-cause/):
this separates the candidate causes on the same images and transforms (RandomResizedCrop, flip, ToTensor,
Normalize: the corpus's JPEG jobs), each sample's thread CPU time and wall time (medians after a warm-up), its
thread's minor page faults and involuntary context switches (means):

* ``main/N``: the loop's thread, torch with N intra-op threads (as in a num_workers=0 run);
* ``main/1``: the same with one intra-op thread (as in a worker);
* ``workers/k``: k DataLoader workers at once, each sample timed in its worker (k = 1: the process alone);
* ``spawned/k``: the same with workers started by ``spawn`` (a fresh interpreter, no heap shared with the
  loop's process by fork);
* ``spin/k``: a fixed amount of pure-Python work in k processes at once (the host's own slowdown when k CPUs are
  busy, whatever the job: shared cores, frequency, memory); ``per_cpu``: that work pinned to each CPU alone.

    python benchmarks/where_prepared.py DATA --workers 1,2,4,8 --samples 400 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

from torchvision import datasets


class Timed(datasets.ImageFolder):
    """Each sample's (thread CPU ns, wall ns, minor faults, involuntary switches) instead of the sample."""

    def __getitem__(self, i):
        r, c, w = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time_ns(), time.perf_counter_ns()
        super().__getitem__(i)
        c, w, r2 = time.thread_time_ns() - c, time.perf_counter_ns() - w, resource.getrusage(resource.RUSAGE_THREAD)
        return c, w, r2.ru_minflt - r.ru_minflt, r2.ru_nivcsw - r.ru_nivcsw


def _dataset(root: str):
    from torchvision import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return Timed(root, transform=tf)


def _summary(times: list, warm: int) -> dict:
    kept = times[warm:] or times
    return {"cpu_ms": statistics.median(t[0] for t in kept) / 1e6,
            "wall_ms": statistics.median(t[1] for t in kept) / 1e6, "samples": len(kept),
            "minor_faults": statistics.mean(t[2] for t in kept), "preempted": statistics.mean(t[3] for t in kept)}


def in_main(ds, n: int, threads: int) -> dict:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _summary([ds[i % len(ds)] for i in range(n)], n // 10)
    finally:
        torch.set_num_threads(before)


def in_workers(ds, n: int, k: int, context: str | None = None) -> dict:
    import torch

    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=k, prefetch_factor=4, shuffle=False,
                                         multiprocessing_context=context)
    got = [t for _, t in zip(range(n * k), loader, strict=False)]
    return _summary(got, len(got) // 10)


def _spin(_):
    t = time.thread_time_ns()
    x = 0
    for i in range(3_000_000):
        x += i * i
    return time.thread_time_ns() - t


def per_cpu(rounds: int = 3) -> dict:
    """The same fixed work pinned to each CPU in turn, alone: how much the CPUs themselves differ."""
    out = {}
    before = os.sched_getaffinity(0)
    try:
        for c in sorted(before):
            os.sched_setaffinity(0, {c})
            out[c] = statistics.median(_spin(None) for _ in range(rounds)) / 1e6
    finally:
        os.sched_setaffinity(0, before)
    return out


def spin(k: int, rounds: int = 6) -> dict:
    import multiprocessing as mp

    with mp.get_context("fork").Pool(k) as pool:
        times = pool.map(_spin, range(k * rounds), chunksize=1)
    return {"cpu_ms": statistics.median(times) / 1e6, "tasks": len(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="an ImageFolder root of JPEGs")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--samples", type=int, default=400, help="samples a setting (a worker setting: per worker)")
    ap.add_argument("--rounds", type=int, default=2, help="every setting this many times, in turn")
    ap.add_argument("--json", type=str, default=None)
    a = ap.parse_args()
    import torch

    ks = [int(x) for x in a.workers.split(",")]
    ds = _dataset(a.data)
    cpus = len(os.sched_getaffinity(0))
    rows: dict[str, list] = {}
    for r in range(a.rounds):
        for name, f in ([(f"main/{torch.get_num_threads()}", lambda: in_main(ds, a.samples, torch.get_num_threads())),
                         ("main/1", lambda: in_main(ds, a.samples, 1))]
                        + [(f"workers/{k}", lambda k=k: in_workers(ds, a.samples, k)) for k in ks]
                        + [(f"spawned/{k}", lambda k=k: in_workers(ds, a.samples, k, "spawn")) for k in ks[:1]]
                        + [(f"spin/{k}", lambda k=k: spin(k)) for k in [1, *ks] if k <= cpus]):
            res = f()
            rows.setdefault(name, []).append(res)
            print(f"round {r} {name:12} cpu {res['cpu_ms']:.3f} ms" +
                  (f" wall {res['wall_ms']:.3f} ms faults {res['minor_faults']:.1f} preempted {res['preempted']:.2f}"
                   if "wall_ms" in res else ""), flush=True)
    out = {"cpus": cpus, "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
           "rows": {k: {"cpu_ms": statistics.median(x["cpu_ms"] for x in v), "runs": v} for k, v in rows.items()}}
    out["per_cpu_ms"] = [per_cpu() for _ in range(a.rounds)]
    for r, row in enumerate(out["per_cpu_ms"]):
        print(f"round {r} per CPU (spin ms): " + " ".join(f"{c}:{v:.0f}" for c, v in row.items()))
    base = out["rows"]["main/1"]["cpu_ms"]
    for k, v in out["rows"].items():
        print(f"{k:12} cpu {v['cpu_ms']:.3f} ms  x{v['cpu_ms'] / base:.2f} of main/1" if not k.startswith("spin")
              else f"{k:12} cpu {v['cpu_ms']:.3f} ms  x{v['cpu_ms'] / out['rows']['spin/1']['cpu_ms']:.2f} of spin/1")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
