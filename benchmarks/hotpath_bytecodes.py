"""Bytecodes per batch of lotus's num_workers=0 hot path, by function: a deterministic count (no timer).

Runs the trivial pipeline of ``benchmarks/overhead_pairs.py`` traced, warms up, then counts the bytecodes
that ``sys.settrace`` opcode events see over ``--batches`` batches, per (file, function), and prints the
per-batch figures and the lotus / other split. Use it before and after a change of the hot path (the
CPU-time benchmarks on a shared VM drift more than a few percent between runs; this count does not).
Plain batches and detail batches (per-sample and per-op records: more lotus code) are counted apart;
under the tracer of ``sys.settrace`` the budget picks more detail batches than it would (the count
slows the pipeline more than it slows the clocks' cost estimate); ``--detail full`` makes all of them
detail batches.

    python benchmarks/hotpath_bytecodes.py --batches 200
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path


def count(batches: int, detail: str, batch_size: int = 8) -> tuple[collections.Counter, collections.Counter]:
    """Bytecodes per (file, function) of the plain batches and of the detail batches (key None: how many
    batches)."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from overhead_pairs import _Trivial

    from lotus.dataloader import DataLoader

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="lotus-bytecodes-") as tmp:
        loader = DataLoader(_Trivial((batches + 200) * batch_size), batch_size=batch_size, trace_dir=tmp,
                            trace_detail=detail)
        it = iter(loader)
        for _ in range(100):
            next(it)
        counts: collections.Counter = collections.Counter()  # of the batch running now
        kinds = {True: collections.Counter(), False: collections.Counter()}  # detail batches, plain ones
        rec = loader._lotus.recorder()

        def trace(frame, event, arg):
            frame.f_trace_opcodes = True
            if event == "opcode":
                code = frame.f_code
                where = code.co_filename.split("/src/")[-1].split("site-packages/")[-1]
                counts[(where, code.co_name)] += 1
            return trace

        for _ in range(batches):
            sys.settrace(trace)  # only the frames that next() opens are traced
            try:
                next(it)
            finally:
                sys.settrace(None)
            kinds[bool(rec.detail)][None] += 1
            kinds[bool(rec.detail)].update(counts)
            counts.clear()
        del it
    return kinds[False], kinds[True]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--detail", choices=["budget", "full"], default="budget")
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args(argv)
    for label, counts in zip(("plain", "detail"), count(args.batches, args.detail), strict=True):
        n = counts.pop(None, 0)
        if not n:
            continue
        print(f"{label} batches ({n}): bytecodes per batch")
        for (where, name), v in counts.most_common(args.top):
            print(f"{v / n:8.1f}  {where}:{name}")
        lotus = sum(v for (where, _), v in counts.items() if where.startswith("lotus/"))
        other = sum(counts.values()) - lotus
        print(f"  lotus {lotus / n:.1f}, everything else {other / n:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
