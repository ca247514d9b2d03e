"""Engine comparison for out-of-core analysis (issue 17): the same per-op aggregate of a synthetic
lotus trace (count, sum, min, max, mean, std, p25/median/p75/p90/p99 of every op's duration, plus the
batch-level rows the batch table needs) computed by

* ``numpy-scan``: lotus's engine (:mod:`lotus.query.scan`): chunks of the native files, no conversion;
* ``duckdb-parquet``: DuckDB (embedded) over a Parquet copy of the run (zstd), converted once
  (conversion timed separately), exact ``quantile_cont`` and ``approx_quantile``;

each in a fresh process pinned to 2 CPUs, with its peak resident memory (ru_maxrss).

    python benchmarks/engines.py /tmp/lotus17/lotus_10000000 --parquet /tmp/lotus17/p10M.parquet
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CONVERT = r"""
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
from lotus.trace.discover import find_run
from lotus.trace.events import clock_offsets, loader_offsets
from lotus.trace.chunks import record_chunks
from lotus.trace.events import _Acc
run = find_run(sys.argv[1]); acc = _Acc(); paths = run.native
off, lo = clock_offsets(paths), loader_offsets(paths)
schema = pa.schema([("code", pa.int32()), ("start_ns", pa.int64()), ("dur_ns", pa.int64()), ("rank", pa.int32()),
                    ("worker_id", pa.int32()), ("loader", pa.int32()), ("epoch", pa.int32()),
                    ("batch_id", pa.int64()), ("sample", pa.int64()), ("arg", pa.int64())])
w = pq.ParquetWriter(sys.argv[2], schema, compression="zstd")
for p in paths:
    for arr, code, fs in record_chunks(p, off, lo.get(p, 0), acc.code):
        n = len(arr)
        w.write_table(pa.table({"code": code, "start_ns": arr["start_ns"] + fs.shift, "dur_ns": arr["dur_ns"],
            "rank": np.full(n, fs.consts["rank"], np.int32), "worker_id": np.full(n, fs.consts["worker_id"], np.int32),
            "loader": arr["loader"].astype(np.int32), "epoch": arr["epoch"], "batch_id": arr["batch_id"],
            "sample": arr["sample"], "arg": arr["arg"]}, schema=schema))
w.close()
"""

NUMPY = r"""
import sys
from lotus.trace.discover import find_run
from lotus.query.scan import scan_run
ev = scan_run(find_run(sys.argv[1]))
t = ev.attrs["op_engine"].op_table()
print(len(ev), len(t))
"""

DUCKDB = r"""
import sys, duckdb
con = duckdb.connect(); con.execute("SET threads=2"); con.execute("SET enable_progress_bar=false")
q = "approx_quantile(dur_ns, [0.25,0.5,0.75,0.9,0.99])" if sys.argv[2] == "approx" else \
    "quantile_cont(dur_ns, [0.25,0.5,0.75,0.9,0.99])"
ops = con.execute(f"SELECT code, count(*), sum(dur_ns), min(dur_ns), max(dur_ns), avg(dur_ns), stddev_pop(dur_ns), {q} "
                  f"FROM read_parquet('{sys.argv[1]}') WHERE code IN (8,9,7,10) OR code >= 26 GROUP BY code").fetchall()
small = con.execute(f"SELECT * FROM read_parquet('{sys.argv[1]}') WHERE code NOT IN (7,8,9) AND code < 26").df()
print(len(small), len(ops))
"""


def child(code: str, *args: str) -> dict:
    pre = "import os; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])\n"
    post = "\nimport resource; print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", pre + code + post, *args], check=True, capture_output=True, text=True)
    dt = time.perf_counter() - t
    lines = out.stdout.strip().splitlines()
    return {"seconds": dt, "peak_rss_mib": int(lines[-1].split()[1]) / 1024, "out": " ".join(lines[:-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--parquet", type=Path, required=True)
    args = ap.parse_args()
    for p in args.run.iterdir():  # warm the page cache
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    res = {}
    if not args.parquet.exists():
        res["convert_to_parquet"] = child(CONVERT, str(args.run), str(args.parquet))
    res["numpy-scan"] = child(NUMPY, str(args.run))
    res["duckdb-parquet exact"] = child(DUCKDB, str(args.parquet), "exact")
    res["duckdb-parquet approx"] = child(DUCKDB, str(args.parquet), "approx")
    native = sum(p.stat().st_size for p in args.run.iterdir())
    for k, v in res.items():
        print(f"{k:24} {v['seconds']:7.2f} s  peak {v['peak_rss_mib']:7.0f} MiB  {v['out']}")
    print(f"native {native / 2**20:.0f} MiB, parquet {args.parquet.stat().st_size / 2**20:.0f} MiB")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
