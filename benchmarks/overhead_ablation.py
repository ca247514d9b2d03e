"""Where the num_workers=0 fast path's per-batch cost goes: variants of it beside stock torch, in one process.

Each variant is a subclass of :class:`lotus.dataloader.fastpath.FastSingleProcessIter` that leaves out or
keeps one piece; all loaders run in blocks of ``K`` batches (default 64), in a random order each round,
so CPython's inline caches in torch's shared iterator code stay specialised for the loader that runs (see
``overhead_blocks.py``). Per round, each loader's median batch CPU time minus torch's; the median over
rounds with a 95% bootstrap interval. The floor variants use the plain fetcher and no detail batches;
``fast_no_detail`` / ``fast_full_detail`` are the fast path with (almost) no detail batches / every batch
in detail: ``fast_path - fast_no_detail`` is what the detail budget spends a batch (its share of the work
should be the budget's 0.5%), ``fast_full_detail - fast_no_detail`` one detail batch's cost.

    python benchmarks/overhead_ablation.py trivial 60        # rounds; ~1 min on 2 cores
    python benchmarks/overhead_ablation.py text 40 --block 64
    python benchmarks/overhead_ablation.py text 60 --only fast_path,fast_no_detail,fast_full_detail
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_pairs as op


def variants():
    from lotus.dataloader import fastpath as fp
    from lotus.dataloader.recorder import mono

    torch_iter = fp._Torch

    class Untraced(fp.FastSingleProcessIter):  # lotus's iterator and plain fetcher, torch's methods only
        __next__ = torch_iter.__next__
        _next_index = torch_iter._next_index

        def __init__(self, loader):
            super().__init__(loader)
            self._dataset_fetcher = self._lotus_plain_fetcher

        def _lotus_collate(self, rec):
            return self._collate_fn

    class Wrap(Untraced):  # a Python __next__ around torch's
        def __next__(self):
            return fp._torch_next(self)

    class Clocks(Untraced):  # ... and its two clock reads
        def __next__(self):
            mono()
            data = fp._torch_next(self)
            mono()
            return data

    class Pack(Untraced):  # ... and packing the pair (discarded)
        def __next__(self):
            w0 = mono()
            data = fp._torch_next(self)
            t1 = mono()
            fp.main_pair(self._lotus_heads, 0, w0, w0, 0, 0, t1, w0, t1, 0, 0, False)
            return data

    class PackAppend(Untraced):  # ... and appending it to the writer's buffer, one batch at a time
        def __next__(self):
            w0 = mono()
            data = fp._torch_next(self)
            t1 = mono()
            self._lotus_rec.w.buf += fp.main_pair(self._lotus_heads, 0, w0, w0, 0, 0, t1, w0, t1, 0, 0, False)
            return data

    class NoCollateTimer(fp.FastSingleProcessIter):  # the fast path with an untimed collation
        def _lotus_collate(self, rec):
            return self._collate_fn

    return {"untraced": Untraced, "wrap": Wrap, "clocks": Clocks, "pack": Pack, "pack_append": PackAppend,
            "no_collate_timer": NoCollateTimer, "fast_path": fp.FastSingleProcessIter}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pipeline", choices=["text", "trivial"])
    p.add_argument("rounds", type=int)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--only", default="", help="comma-separated variants to run (default: all)")
    a = p.parse_args()
    import torch

    from lotus.dataloader import DataLoader

    torch.set_num_threads(1)
    ds = op._Text(2048) if a.pipeline == "text" else op._Trivial(4096)

    def make(cls, **kw):
        ld = DataLoader(ds, batch_size=8, trace_dir=tempfile.mkdtemp(prefix="lotus-ablation-"), **kw)
        ld._get_iterator = lambda: cls(ld)  # this variant's iterator for every epoch
        return ld

    loaders = {"torch": torch.utils.data.DataLoader(ds, batch_size=8),
               "torch2": torch.utils.data.DataLoader(ds, batch_size=8),
               **{k: make(cls) for k, cls in variants().items()}}
    from lotus.dataloader.fastpath import FastSingleProcessIter as Fast
    loaders["fast_no_detail"] = make(Fast, trace_budget_pct=1e-9)  # only each epoch's first batch in detail
    loaders["fast_full_detail"] = make(Fast, trace_detail="full")  # every batch in detail
    if a.only:
        keep = {"torch", "torch2", *a.only.split(",")}
        loaders = {k: v for k, v in loaders.items() if k in keep}
    t = op.shuffled_rounds(loaders, a.rounds, a.block)
    keys = list(t)
    print(f"{a.pipeline}: torch {statistics.median(t['torch']) / 1e3:.1f} us/batch, {a.rounds} rounds of "
          f"blocks of {a.block} batches")
    for k in keys[1:]:
        d = [y - x for x, y in zip(t["torch"], t[k], strict=True)]
        lo, hi = op.bootstrap_median_ci(d, n=500)
        print(f"  {k:17s} {statistics.median(d) / 1e3:+6.2f} us/batch (CI {lo / 1e3:+.2f} .. {hi / 1e3:+.2f})",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
