"""Benchmark of lotus.model: fit + prediction table of a 1M-event trace, and the cache what-if.

    python benchmarks/model.py                 # 1M events, 1.28M samples x 3 epochs x 21 cache sizes
    python benchmarks/model.py --events 200000 --samples 200000 --repeat 1

Each measurement runs in a fresh process (imports included, as a user's `lotus whatif` pays them);
the median of ``--repeat`` runs is printed. Targets (issue 9): fit + table <= 2 s for 1M events.
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

_FIT = r"""
import json, sys, time
t0 = time.perf_counter()
from lotus.model import fit, load_run, prediction_table, default_grid
run = load_run(sys.argv[1])
t1 = time.perf_counter()
model = fit(run)
t2 = time.perf_counter()
w, c = default_grid(model)
table = prediction_table(model, w, c)
t3 = time.perf_counter()
print(json.dumps({"read_s": t1 - t0, "fit_s": t2 - t1, "table_s": t3 - t2, "total_s": t3 - t0,
                  "events": len(run.events), "rows": len(table)}))
"""

_CACHE = r"""
import json, sys, time
import numpy as np
n, epochs = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
from lotus.model.cache import DEFAULT_FRACTIONS, cache_hit_rates
first = [np.random.default_rng(0).permutation(n)]
t1 = time.perf_counter()
df = cache_hit_rates(first, n, n_epochs=epochs, fractions=DEFAULT_FRACTIONS)
t2 = time.perf_counter()
sizes = np.random.default_rng(1).integers(50_000, 200_000, n)
df = cache_hit_rates(first, n, n_epochs=epochs, fractions=DEFAULT_FRACTIONS, sizes_bytes=sizes)
t3 = time.perf_counter()
print(json.dumps({"uniform_s": t2 - t1, "sized_s": t3 - t2, "rows": len(df)}))
"""


def _run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=1_280_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=8, help="cpus_available of the synthetic run (grid size)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from lotus.trace.synthetic import spec_for_events, write_native

    with tempfile.TemporaryDirectory() as tmp:
        spec = spec_for_events(args.events, cpus=args.cpus)
        write_native(os.path.join(tmp, "run"), spec)
        fits = [_run(_FIT, os.path.join(tmp, "run")) for _ in range(args.repeat)]
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "lotus", "whatif", "-d", os.path.join(tmp, "run"), "--json"],
                       check=True, capture_output=True)
        cli_s = time.perf_counter() - t
    caches = [_run(_CACHE, str(args.samples), str(args.epochs)) for _ in range(args.repeat)]
    f = fits[0]
    print(f"trace: {f['events']:,} events, {spec.n_batches} batches, cpus_available {args.cpus}; "
          f"table of {f['rows']} predictions; median of {args.repeat} fresh processes")
    for key in ("read_s", "fit_s", "table_s", "total_s"):
        print(f"  {key[:-2]:>6}: {_median(fits, key):.3f} s")
    print(f"  lotus whatif --json (whole command, one run): {cli_s:.3f} s")
    print(f"cache what-if: {args.samples:,} samples x {args.epochs} epochs x 21 sizes, LRU + static")
    print(f"  uniform sizes: {_median(caches, 'uniform_s'):.3f} s")
    print(f"  per-sample sizes: {_median(caches, 'sized_s'):.3f} s")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
