"""Dask distributed or Ray for ``lotus ... --cluster`` (issue 26, item 2): the same scan on both.

For each engine: start a local cluster with the engine's own commands (a scheduler/head and ``--workers``
worker processes of one thread each, on 127.0.0.1; both clusters up at once), time until it is ready, then
scan RUN's files, the engines in turn, ``--repeat`` rounds (each a fresh process), in the same parts as
lotus does (:func:`lotus.query.parallel.plan`, :func:`lotus.query.scanfiles.scan_files` on
each, merged in file order by :func:`lotus.query.scanmerge.merge_parts`), the local process pool alongside
for reference; check the merged parts are the same (the batch table and op moments),
and print the engines' import time and installed size. Ray runs under ``--ray-python`` (an interpreter
that has ray; lotus comes from this checkout's src)::

    python benchmarks/cluster_engines.py /tmp/lotus26/lotus_100000000_e10 --ray-python /tmp/rayvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

CHILD = r"""
import hashlib, json, os, sys, time
engine, run, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
if engine == "dask":
    import distributed
elif engine == "ray":
    import ray
import_s = time.perf_counter() - t
from lotus.query import parallel
from lotus.trace.discover import find_run
from lotus.trace.events import clock_offsets, loader_offsets
from lotus.query.scanfiles import ScanContext
from lotus.query.scanmerge import merge_parts
from lotus.query.batchparts import SUMMARY_COLUMNS
paths = find_run(run).native
ctx = ScanContext(run, clock_offsets(paths), loader_offsets(paths), True, frozenset(SUMMARY_COLUMNS), True, False)
if engine == "ray":
    from dataclasses import replace
    ray.init(address="auto", logging_level="ERROR")
    task = ray.remote(num_cpus=1)(parallel.scan_task)
    threads = int(ray.cluster_resources().get("CPU", 1))
    def parts():
        tasks = parallel.plan(paths, threads * parallel.TASKS_PER_JOB)
        refs = [task.remote((t, replace(ctx, replay=True))) for t in tasks]
        for r in refs:
            yield ray.get(r)
else:
    if engine == "dask":
        os.environ["LOTUS_CLUSTER"] = os.environ["BENCH_ADDRESS"]
    def parts():
        return parallel.scan_parts(paths, ctx)
times, digest = [], None
for _ in range(repeat):
    t = time.perf_counter()
    part = merge_parts(parts())
    table = part.batch_parts.finish({"path": run})
    times.append(time.perf_counter() - t)
    h = hashlib.sha256()
    for a in (table.batch_id, *table.raw.values(), part.moments.total, part.moments.mean, part.moments.m2,
              part.moments.hist):
        h.update(a.tobytes())
    d = h.hexdigest()
    assert digest in (None, d)
    digest = d
print(json.dumps({"engine": engine, "import_s": import_s, "scan_s": times, "digest": digest}))
"""


def _wait_file(path: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.05)


def start_dask(workers: int, env: dict, tmp: Path) -> tuple[list, str, float]:
    """The scheduler and ``workers`` worker processes (dask's CLI); (processes, address, seconds to ready)."""
    t = time.perf_counter()
    sched_file = tmp / "scheduler.json"
    dask = str(Path(sys.executable).with_name("dask"))
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched_file)], env=env, stderr=subprocess.DEVNULL)]
    _wait_file(sched_file)
    for i in range(workers):
        procs.append(subprocess.Popen([dask, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                                       "--no-nanny", "--no-dashboard", "--name", f"w{i}"], env=env,
                                      stderr=subprocess.DEVNULL))
    address = json.loads(sched_file.read_text())["address"]
    code = ("import sys\nfrom distributed import Client\nc = Client(sys.argv[1], timeout=60)\n"
            "c.wait_for_workers(int(sys.argv[2]), timeout=60)\nc.close()\n")
    subprocess.run([sys.executable, "-c", code, address, str(workers)], env=env, check=True)
    return procs, address, time.perf_counter() - t


def start_ray(workers: int, env: dict, python: str) -> float:
    t = time.perf_counter()
    ray = str(Path(python).with_name("ray"))
    subprocess.run([ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--num-cpus", str(workers),
                    "--include-dashboard=false", "--disable-usage-stats"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code = ("import ray, time\nray.init(address='auto', logging_level='ERROR')\n"
            f"ray.get([ray.remote(num_cpus=1)(lambda: 1).remote() for _ in range({workers})])\n")
    subprocess.run([python, "-c", code], env=env, check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def child(python: str, engine: str, run: str, repeat: int, env: dict) -> dict:
    out = subprocess.run([python, "-c", CHILD, engine, run, str(repeat)], env=env, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def site_size(python: str, names: list[str]) -> int:
    code = ("import importlib.util, os, sys\ntotal = 0\nfor n in sys.argv[1:]:\n"
            "    spec = importlib.util.find_spec(n)\n    d = os.path.dirname(spec.origin)\n"
            "    total += sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)\n"
            "print(total)\n")
    return int(subprocess.run([python, "-c", code, *names], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory (e.g. benchmarks/ingest.py's 100M-event run)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ray-python", default=None, help="a Python with ray installed (skip Ray without)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "LOTUS_JOBS": "",
           "PYTHONWARNINGS": "ignore"}
    import statistics
    import tempfile

    results = {"local": {"engine": "local", "scan_s": []}}
    with tempfile.TemporaryDirectory() as tmp:
        procs, address, ready = start_dask(args.workers, env, Path(tmp))
        results["dask"] = {"engine": "dask", "scan_s": [], "cluster_ready_s": ready, "installed_bytes": site_size(
            sys.executable, ["dask", "distributed", "tornado", "msgpack", "toolz", "partd", "zict", "tblib"])}
        runs = {"local": (sys.executable, {**env, "LOTUS_JOBS": str(args.workers)}),
                "dask": (sys.executable, {**env, "BENCH_ADDRESS": address})}
        try:
            if args.ray_python:
                ready = start_ray(args.workers, env, args.ray_python)
                results["ray"] = {"engine": "ray", "scan_s": [], "cluster_ready_s": ready,
                                  "installed_bytes": site_size(args.ray_python,
                                                               ["ray", "grpc", "google.protobuf", "jsonschema"])}
                runs["ray"] = (args.ray_python, env)
            for _ in range(args.repeat):  # in turn: the neighbours' load falls on every engine alike
                for name, (python, e) in runs.items():
                    r = child(python, name, args.run, 1, e)
                    results[name]["scan_s"] += r["scan_s"]
                    results[name].update(import_s=r["import_s"], digest=r["digest"])
        finally:
            for p in reversed(procs):
                p.kill()
                p.wait()
            if args.ray_python:
                subprocess.run([str(Path(args.ray_python).with_name("ray")), "stop", "--force"], env=env, check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = list(results.values())
    for r in results:
        r["scan_median_s"] = statistics.median(r["scan_s"])
    same = len({r["digest"] for r in results}) == 1
    print(f"{'engine':8} {'ready s':>8} {'import s':>8} {'scan median s':>13} {'each':>32} {'installed MB':>12}")
    for r in results:
        scans = " ".join(f"{x:.2f}" for x in r["scan_s"])
        print(f"{r['engine']:8} {r.get('cluster_ready_s', 0):>8.2f} {r['import_s']:>8.2f} {r['scan_median_s']:>13.2f} "
              f"{scans:>32} {r.get('installed_bytes', 0) / 2**20:>12.1f}")
    print(f"same merged parts on every engine: {same}; load average {os.getloadavg()[0]:.2f}")
    print(json.dumps({"results": results, "same": same}))


if __name__ == "__main__":
    main()
