"""``lotus tune`` with its probes in one process against a process per probe, interleaved repeats.

Runs ``lotus tune --only num_workers`` on one job shape of ``benchmarks/corpus.py`` N times each way, the two
modes alternating (one-process first in odd pairs, second in even ones), and prints per mode: probes, seconds,
the seconds of the probes after the first, and the worker count chosen. Whether the mode changes the search's
path (the number of probes) needs repeats: one run each way cannot tell it from the search's own spread.

    python benchmarks/tune_series.py --shape cpu_bound --pairs 5 --json out.json      # the 2-core VM
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import JOB, SHAPES


def run(shape: str, host: str, per_process: bool, seconds: float, minutes: float, out: Path) -> dict:
    args, cpus, workers, sweep, *_ = SHAPES[host][shape]
    argv = [sys.executable, "-m", "lotus", "tune", "--only", "num_workers", "--cpus", f"0-{cpus - 1}",
            "--max-seconds", str(seconds), "--budget-minutes", str(minutes), "--max-workers", str(max(sweep)),
            "--out", str(out), "--json", *(["--process-per-probe"] if per_process else []), "--",
            *JOB, *args, "-j", str(workers), "--seconds", "100000"]
    t = time.monotonic()
    r = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=1800)
    secs = time.monotonic() - t
    d = json.loads(r.stdout)
    walls = [p["wall_s"] for p in d["probes"]]
    return {"mode": "process-per-probe" if per_process else "one-process", "probes": len(walls), "seconds": secs,
            "first_s": walls[0], "later_s": walls[1:], "chosen": d["best"]["num_workers"],
            "stopped": d["stopped"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="cpu_bound")
    p.add_argument("--host", default="local", choices=sorted(SHAPES))
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--tune-minutes", type=float, default=2.0)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            for per_process in ((False, True) if i % 2 == 0 else (True, False)):
                r = run(a.shape, a.host, per_process, a.seconds, a.tune_minutes, Path(tmp) / f"{i}-{per_process}")
                rows.append(r)
                print(f"pair {i}: {r['mode']:17s} {r['probes']} probes {r['seconds']:5.1f} s, chose {r['chosen']}, "
                      f"probes after the first {[round(x, 1) for x in r['later_s']]} s", flush=True)
    for mode in ("one-process", "process-per-probe"):
        rs = [r for r in rows if r["mode"] == mode]
        later = [x for r in rs for x in r["later_s"]]
        print(f"{mode:17s}: probes {[r['probes'] for r in rs]} (mean {statistics.fmean(r['probes'] for r in rs):.1f}), "
              f"seconds median {statistics.median(r['seconds'] for r in rs):.1f} "
              f"[{min(r['seconds'] for r in rs):.1f}-{max(r['seconds'] for r in rs):.1f}], "
              f"a probe after the first median {statistics.median(later) if later else float('nan'):.2f} s, "
              f"chose {[r['chosen'] for r in rs]}")
    if a.json is not None:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
