"""Lotus vs torch with *blocked* alternation: K batches of one loader, then K of the other (ABBA over blocks).

A cross-check of ``overhead_pairs.py``: alternating every batch makes CPython's inline caches in torch's
shared iterator code (``__next__``, ``_next_data``, the fetcher) see two iterator types in turn, so both
loaders run partly de-specialised; blocks of 64 let each run specialised as in a real loop (where only
one loader type is hot). Per-batch difference of matched batches (the same data), median and 95%
bootstrap interval; a torch-vs-torch control beside it. num_workers=0, thread CPU time.

    python benchmarks/overhead_blocks.py trivial 4000 1,64
    python benchmarks/overhead_blocks.py text 3000 1,64
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_pairs as op


def main() -> int:
    import torch

    from lotus.dataloader import DataLoader

    torch.set_num_threads(1)
    pipe, total = sys.argv[1], int(sys.argv[2])
    blocks = [int(k) for k in (sys.argv[3] if len(sys.argv) > 3 else "1,64").split(",")]
    ds = op._Text(4096) if pipe == "text" else op._Trivial(4096)

    def stock():
        return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=0)

    def traced():
        return DataLoader(ds, batch_size=8, num_workers=0, trace_dir=tempfile.mkdtemp(prefix="lotus-blocks-"))

    for name, make in (("lotus", traced), ("control", stock)):
        for k in blocks:
            ca, cb = op._Cycler(stock()), op._Cycler(make())
            for _ in range(30):
                ca.next_cpu_ns()
                cb.next_cpu_ns()
            ta: list[int] = []
            tb: list[int] = []
            for j in range(total // k):
                first, second = (ca, cb) if j % 2 == 0 else (cb, ca)
                x = [first.next_cpu_ns() for _ in range(k)]
                y = [second.next_cpu_ns() for _ in range(k)]
                a, b = (x, y) if j % 2 == 0 else (y, x)
                ta += a
                tb += b
            d = [y - x for x, y in zip(ta, tb, strict=True)]
            lo, hi = op.bootstrap_median_ci(d, n=500)
            med = statistics.median(d)
            print(f"{pipe} {name:8s} K={k:4d}: {med / 1e3:+6.2f} us/batch (CI {lo / 1e3:+.2f} .. {hi / 1e3:+.2f}) "
                  f"{med / statistics.median(ta):+.2%} torch {statistics.median(ta) / 1e3:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
