"""Tracer cost of two lotus versions and stock torch, interleaved batch by batch in ONE process.

A before/after of a hot-path change, free of run-to-run drift: the lotus on ``sys.path`` (base) and the
one in ``--new-src`` (imported as ``lotus_new``, a renamed copy made in a temporary directory) run beside
two stock torch loaders, num_workers=0, in a random order each round; each batch's thread CPU time is
compared with the torch batch of the same round (median of per-round ratios, 95% bootstrap interval;
torch vs torch is the method's floor). Pipelines from ``overhead_pairs.py``.

    PYTHONPATH=/path/to/base/src python benchmarks/overhead_versions.py --new-src src text 2000
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_pairs as op


def renamed_copy(src: Path, dest: Path) -> None:
    """``src/lotus`` copied to ``dest/lotus_new`` with its own imports renamed (a second, independent package)."""
    pkg = dest / "lotus_new"
    shutil.copytree(src / "lotus", pkg)
    for f in pkg.rglob("*.py"):
        text = f.read_text()
        text = re.sub(r"\b(from|import) lotus(\.| |$)", r"\1 lotus_new\2", text, flags=re.M)
        f.write_text(text.replace('"lotus.', '"lotus_new.'))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--new-src", type=Path, required=True, help="the src/ directory of the new version")
    p.add_argument("pipeline", choices=["text", "trivial", "jpeg"])
    p.add_argument("rounds", type=int)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    renamed_copy(a.new_src, tmp)
    sys.path.insert(0, str(tmp))
    import torch
    from lotus_new.dataloader import DataLoader as New

    from lotus.dataloader import DataLoader as Base

    ds = {"text": lambda: op._Text(2048), "trivial": lambda: op._Trivial(4096),
          "jpeg": lambda: op._jpeg_dataset(tmp / "data", 256)}[a.pipeline]()
    loaders = {"torch": torch.utils.data.DataLoader(ds, batch_size=8),
               "base": Base(ds, batch_size=8, trace_dir=str(tmp / "base")),
               "new": New(ds, batch_size=8, trace_dir=str(tmp / "new")),
               "torch2": torch.utils.data.DataLoader(ds, batch_size=8)}
    t = op.shuffled_rounds(loaders, a.rounds)
    out = {"pipeline": a.pipeline, "rounds": a.rounds, "python": sys.version.split()[0], "torch": torch.__version__,
           "torch_ms_per_batch": statistics.median(t["torch"]) / 1e6}
    for k, ref in (("base", "torch"), ("new", "torch"), ("torch2", "torch"), ("new", "base")):
        r = [y / x - 1 for x, y in zip(t[ref], t[k], strict=True)]
        lo, hi = op.bootstrap_median_ci(r, n=1000)
        d = statistics.median([(y - x) / 8e3 for x, y in zip(t[ref], t[k], strict=True)])
        out[f"{k}_vs_{ref}"] = {"median": statistics.median(r), "ci95": [lo, hi], "us_per_sample": d}
        print(f"{a.pipeline:8s} {k:6s} vs {ref:5s} {statistics.median(r):+.2%} ({lo:+.2%} .. {hi:+.2%}) "
              f"{d:+.2f} us/sample")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
