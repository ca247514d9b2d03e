"""Does `lotus run` slow the job down? The job alone and the same job under ``lotus run``, alternating run by run
(ABBA: the order flips every round), each run its own process on the same CPUs, each run's rate by the job's own
clock (``benchmarks/reference_train.py --json``: its steady state after the prefetched ramp). Truth from outside
lotus: both variants are measured by the job, never by lotus.

    python benchmarks/traced_vs_alone.py --cpus 0-15 --rounds 3 --out res/c16 -- DATA -a resnet152 -b 128 \
        --bf16 --channels-last --pin-memory --persistent-workers -j 16 --seconds 8

Prints every run and, per round, traced / alone; then the mean of the rounds' ratios with its 95% interval
(Student's t over rounds) and writes ``OUT/summary.json``.

``--variants alone,traced,probe`` adds a third: the job as ``lotus tune`` and ``lotus sensitivity`` probe it
(``lotus run --steps N --precision P --max-seconds S``: the in-process stop rule ends it). A probe's job is ended
from inside ``next()``, before it can write its own clock: its rate is lotus's (``lotus analyze throughput``),
printed beside the traced runs' two (their own clock and lotus's, the same window) so that a probe's
difference from ``lotus run`` of the same job shows apart from the tracer's.
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


def lotus_rate(trace: Path) -> dict:
    """lotus's rate of a traced run (``lotus analyze throughput --json``): samples/s, its interval, the window."""
    r = subprocess.run([sys.executable, "-m", "lotus", "analyze", "throughput", "-d", str(trace), "--json"],
                       capture_output=True, text=True, timeout=300, check=False)
    try:
        doc = next(iter(json.loads(r.stdout)["configs"].values()))
    except (ValueError, KeyError, StopIteration):
        return {}
    return {k: doc.get(k) for k in ("samples_per_s", "ci95", "steady_batches", "window_s", "note")}


def run(variant: str, cpus: str, job: list[str], out: Path, tag: str, probe: list[str]) -> dict | None:
    own = out / f"{tag}-{variant}.json"
    trace = out / f"{tag}-{variant}-trace"
    cmd = [*JOB, *job, "--json", str(own)]
    if variant == "alone":
        cmd = ["taskset", "-c", cpus, *cmd]
    else:
        more = [*probe, "--", *cmd, "--seconds", "100000"] if variant == "probe" else ["--", *cmd]
        cmd = [sys.executable, "-m", "lotus", "run", "--cpus", cpus, "-o", str(trace), "--no-verdict", *more]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    d = json.loads(own.read_text()) if own.exists() else {}
    if variant != "alone":
        d["lotus"] = lotus_rate(trace)
    rate = d.get("samples_per_s") or d.get("lotus", {}).get("samples_per_s")
    if r.returncode or not rate:
        print(f"{tag} {variant}: failed (exit {r.returncode}): {r.stderr[-400:]}", file=sys.stderr)
        return None
    d["rate"] = rate  # the job's own clock, or (a probe) lotus's
    d["wall_s"] = time.monotonic() - t
    lo = d.get("lotus", {})
    extra = (f"  lotus {lo['samples_per_s']:.1f} over {lo.get('steady_batches')} batches, "
             f"{lo.get('window_s') or 0:.1f} s" if lo.get("samples_per_s") else "")
    wait = d["wait_share"] if d.get("wait_share") is not None else float("nan")  # a probe's job writes none
    print(f"{tag} {variant:6s} {rate:9.1f} samples/s  wait {wait:.3f}{extra}"
          f"  ({d['wall_s']:.0f} s)", flush=True)
    return d


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpus", required=True, help="the CPU list both variants run on (taskset / lotus run --cpus)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--variants", default="alone,traced", help="alone, traced, probe (comma-separated)")
    p.add_argument("--probe", default="--steps 100000 --precision 0.03 --max-seconds 8",
                   help="lotus run's probe options for the probe variant")
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- and reference_train.py's arguments")
    a = p.parse_args()
    job = a.job[1:] if a.job[:1] == ["--"] else a.job
    a.out.mkdir(parents=True, exist_ok=True)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not set(variants) <= {"alone", "traced", "probe"} or "alone" not in variants or len(variants) < 2:
        p.error("--variants: alone and one or both of traced, probe")
    ratios, rows = {v: [] for v in variants if v != "alone"}, []
    for k in range(a.rounds):
        order = variants if k % 2 == 0 else variants[::-1]
        got = {v: run(v, a.cpus, job, a.out, f"r{k}", a.probe.split()) for v in order}
        rows.append({v: ({"rate": d["rate"], "lotus": d.get("lotus")} if d else None) for v, d in got.items()})
        for v, rs in ratios.items():
            if got["alone"] and got[v]:
                rs.append(got[v]["rate"] / got["alone"]["rate"])
                print(f"r{k} {v} / alone {rs[-1]:.3f}", flush=True)
    doc = {"cpus": a.cpus, "job": job, "variants": variants, "rounds": rows, "ratios": ratios}
    for v, rs in ratios.items():
        if rs:
            m = statistics.fmean(rs)
            half = T975.get(len(rs) - 1, 1.96) * statistics.stdev(rs) / math.sqrt(len(rs)) if len(rs) > 1 else None
            doc[f"{v}_mean_ratio"], doc[f"{v}_ci95"] = m, ([m - half, m + half] if half is not None else None)
            print(f"{v} / alone: mean {m:.3f}" + (f" (95% {m - half:.3f} .. {m + half:.3f})" if half else "")
                  + f" over {len(rs)} rounds")
    (a.out / "summary.json").write_text(json.dumps(doc, indent=1))
    return 0 if any(ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
