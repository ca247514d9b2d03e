"""What a worker's single intra-op thread costs a batch that the main process fetched with torch's default threads.

A ``num_workers=0`` job fetches its batches in the main process, where torch's intra-op pool (one thread per
CPU) runs the transforms' tensor ops (ToTensor, Normalize); a DataLoader worker runs them on one thread
(torch sets ``torch.set_num_threads(1)`` in workers). This fetches batches of the JPEG ImageFolder of
``benchmarks/reference_train.py`` in this process, alternating batch by batch between the default threads and
one thread (paired, so the host's drift cancels), and prints each mode's median wall, thread CPU and process
CPU (the pool's threads spin between parallel regions: the process CPU is no measure of their work) and the
median of the paired ratios.

    taskset -c 0-7 python benchmarks/nw0_threads.py /tmp/jpegs 30
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    import torch
    from reference_train import image_folder
    from torch.utils.data import default_collate

    argv = sys.argv[1:] if argv is None else argv
    ds = image_folder(Path(argv[0]))
    pairs = int(argv[1]) if len(argv) > 1 else 30
    batch = int(argv[2]) if len(argv) > 2 else 128
    default = torch.get_num_threads()
    rng = random.Random(0)
    res: dict[int, list[tuple[int, int, int]]] = {1: [], default: []}

    def fetch() -> tuple[int, int, int]:
        idx = [rng.randrange(len(ds)) for _ in range(batch)]
        t0, c0, p0 = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
        default_collate([ds[i] for i in idx])
        return time.perf_counter_ns() - t0, time.thread_time_ns() - c0, time.process_time_ns() - p0

    fetch()  # warm-up
    for k in range(pairs):
        for th in ((1, default) if k % 2 else (default, 1)):
            torch.set_num_threads(th)
            res[th].append(fetch())
    torch.set_num_threads(default)
    for th, v in res.items():
        wall, cpu, proc = (statistics.median(x[i] for x in v) / 1e6 for i in range(3))
        print(f"threads={th:2d} n={len(v)} wall {wall:.1f} ms thread-cpu {cpu:.1f} ms process-cpu {proc:.1f} ms")
    ratios = [a[0] / b[0] for a, b in zip(res[1], res[default], strict=True)]
    print(f"paired wall ratio 1-thread/default: median {statistics.median(ratios):.3f} over {len(ratios)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
