"""``lotus viz`` benchmark: a generated lotus trace of N events (default 1M) to Chrome Trace JSON.

Times the whole command (``python -m lotus viz``: start-up, reading, batches, JSON) in a subprocess
pinned to at most 2 CPUs, median of ``--repeat`` runs, fine and ``--coarse``; checks the output parses.

    python benchmarks/viz.py                      # 1M events
    python benchmarks/viz.py --events 200000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pinned():
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])


def run_viz(run: Path, out: Path, coarse: bool) -> float:
    cmd = [sys.executable, "-m", "lotus", "viz", "--data-dir", str(run), "--out", str(out)]
    if coarse:
        cmd.append("--coarse")
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, preexec_fn=pinned)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from lotus.trace.synthetic import spec_for_events, write_native

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        write_native(run, spec_for_events(args.events, "lotus", n_workers=4, batch_size=32))
        for p in run.iterdir():
            p.read_bytes()
        report = {}
        for coarse in (False, True):
            out = Path(tmp) / f"trace{'_coarse' if coarse else ''}.json"
            times = [run_viz(run, out, coarse) for _ in range(args.repeat)]
            with open(out) as f:
                n = len(json.load(f)["traceEvents"])
            key = "coarse" if coarse else "fine"
            report[key] = {"seconds_median": statistics.median(times), "runs": times, "trace_events": n,
                           "json_bytes": out.stat().st_size}
            print(f"lotus viz{' --coarse' if coarse else '':9} {args.events:,} events -> {n:,} trace events, "
                  f"{out.stat().st_size / 2**20:.0f} MB: median {statistics.median(times):.2f} s "
                  f"(runs {', '.join(f'{t:.2f}' for t in times)})")
        print(json.dumps(report))


if __name__ == "__main__":
    main()
