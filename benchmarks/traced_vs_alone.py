"""Does `lotus run` slow the job down? The job alone and the same job under ``lotus run``, alternating run by run
(ABBA: the order flips every round), each run its own process on the same CPUs, each run's rate by the job's own
clock (``benchmarks/reference_train.py --json``: its steady state after the prefetched ramp). Truth from outside
lotus: both variants are measured by the job, never by lotus.

    python benchmarks/traced_vs_alone.py --cpus 0-15 --rounds 3 --out res/c16 -- DATA -a resnet152 -b 128 \
        --bf16 --channels-last --pin-memory --persistent-workers -j 16 --seconds 8

Prints every run and, per round, traced / alone; then the mean of the rounds' ratios with its 95% interval
(Student's t over rounds) and writes ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = [sys.executable, str(REPO / "benchmarks" / "reference_train.py")]
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def run(variant: str, cpus: str, job: list[str], out: Path, tag: str) -> dict | None:
    own = out / f"{tag}-{variant}.json"
    cmd = [*JOB, *job, "--json", str(own)]
    if variant == "alone":
        cmd = ["taskset", "-c", cpus, *cmd]
    else:
        cmd = [sys.executable, "-m", "lotus", "run", "--cpus", cpus, "-o", str(out / f"{tag}-trace"), "--no-verdict",
               "--", *cmd]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if r.returncode or not own.exists():
        print(f"{tag} {variant}: failed (exit {r.returncode}): {r.stderr[-400:]}", file=sys.stderr)
        return None
    d = json.loads(own.read_text())
    d["wall_s"] = time.monotonic() - t
    print(f"{tag} {variant:6s} {d['samples_per_s']:9.1f} samples/s  wait {d.get('wait_share', float('nan')):.3f}"
          f"  ({d['wall_s']:.0f} s)", flush=True)
    return d


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpus", required=True, help="the CPU list both variants run on (taskset / lotus run --cpus)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- and reference_train.py's arguments")
    a = p.parse_args()
    job = a.job[1:] if a.job[:1] == ["--"] else a.job
    a.out.mkdir(parents=True, exist_ok=True)
    ratios, rows = [], []
    for k in range(a.rounds):
        order = ("alone", "traced") if k % 2 == 0 else ("traced", "alone")
        got = {v: run(v, a.cpus, job, a.out, f"r{k}") for v in order}
        rows.append({v: (d["samples_per_s"] if d else None) for v, d in got.items()})
        if all(got.values()):
            ratios.append(got["traced"]["samples_per_s"] / got["alone"]["samples_per_s"])
            print(f"r{k} traced / alone {ratios[-1]:.3f}", flush=True)
    doc = {"cpus": a.cpus, "job": job, "rounds": rows, "ratios": ratios}
    if ratios:
        m = statistics.fmean(ratios)
        half = (T975.get(len(ratios) - 1, 1.96) * statistics.stdev(ratios) / math.sqrt(len(ratios))
                if len(ratios) > 1 else None)
        doc.update(mean_ratio=m, ci95=[m - half, m + half] if half is not None else None)
        print(f"traced / alone: mean {m:.3f}" + (f" (95% {m - half:.3f} .. {m + half:.3f})" if half else "")
              + f" over {len(ratios)} rounds")
    (a.out / "summary.json").write_text(json.dumps(doc, indent=1))
    return 0 if ratios else 1


if __name__ == "__main__":
    sys.exit(main())
