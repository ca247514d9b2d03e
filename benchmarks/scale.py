"""Scale of the analysis over a whole cluster's traces (issue 26, item 4).

Generates once (``--dir``) a synthetic job of ``--ranks`` ranks in ``--nodes`` node directories
(``node00/``... written by host ``node00``..., DDP-like lockstep, one rank with a slow input pipeline so that
``lotus analyze ranks`` has a straggler to name; 4 workers a rank, batches of 32, ``--epochs`` epochs), then
times ``lotus analyze CMD --json`` for each command of ``--commands`` in fresh processes:

* for each J in ``--jobs`` (``1,2``; ``all`` = every core): pinned to the first J CPUs, ``$LOTUS_JOBS=J``;
* with ``--cluster-workers K``: on a local Dask cluster (``dask scheduler`` + K ``dask worker`` processes of one
  thread, 127.0.0.1) through ``--cluster``, lotus's own process pinned to one CPU;

in turn, ``--repeat`` rounds (the neighbours' load falls on every setting alike); reports the median time,
events/s, the speed-up over the first setting, the peak memory (the command's own and summed with its
worker processes) and whether the outputs are byte-identical. Then, on paper, what ``--paper-events`` events
cost on ``--paper-nodes`` nodes of ``--paper-cores`` cores from the measured one-core rate (labelled as such).

Here (2 cores)::

    python benchmarks/scale.py --events 100000000 --ranks 64 --nodes 8 --jobs 1,2 --cluster-workers 2 --dir /tmp/lotus26

On a 16-core host (the figures for docs/results; not run by the author)::

    python benchmarks/scale.py --events 1000000000 --compress --jobs 1,2,4,8,12,16 --repeat 3 --dir /data/lotus26
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_engines import start_dask  # benchmarks import each other from this directory
from ingest import _generate, cli_once

SRC = os.environ.get("LOTUS_BENCH_SRC") or str(Path(__file__).resolve().parents[1] / "src")  # another tree's code


def generate(run: Path, n: int, ranks: int, nodes: int, epochs: int, compress: bool = False) -> None:
    code = ("import sys\nfrom lotus.trace.synthetic import spec_for_events, write_native\n"
            "n, ranks, nodes, epochs, compress = map(int, sys.argv[2:7])\n"
            "spec = spec_for_events(n, 'lotus', n_workers=4, batch_size=32, epochs=epochs, ranks=ranks, sync=True,\n"
            "                       slow_rank=ranks // 3, slow_rank_load=1.6, step_ms=60.0)\n"
            "write_native(sys.argv[1], spec, ranks_per_node=max(ranks // nodes, 1), compress=bool(compress))\n")
    subprocess.run([sys.executable, "-c", code, str(run), str(n), str(ranks), str(nodes), str(epochs),
                    str(int(compress))], check=True)


def tree_size(run: Path) -> int:
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--compress", action="store_true",
                    help="zstd-compressed files (~10 bytes an event: 1B events fit in a page cache of 16 GB)")
    ap.add_argument("--jobs", default="1,all", help="comma-separated process counts ('all': every core)")
    ap.add_argument("--cluster-workers", type=int, default=0, help="also on a local Dask cluster of K workers")
    ap.add_argument("--commands", default="stats,verdict,ranks")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--paper-events", type=float, default=100e9)
    ap.add_argument("--paper-nodes", type=int, default=32)
    ap.add_argument("--paper-cores", type=int, default=16)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    name = f"job_{args.events}_r{args.ranks}_n{args.nodes}_e{args.epochs}" + ("_zst" if args.compress else "")
    run = args.dir / name
    if not run.exists():
        generate(run, args.events, args.ranks, args.nodes, args.epochs, args.compress)
    size = tree_size(run)
    for p in run.rglob("*.lotustrace*"):  # warm the page cache (if it holds them)
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    env = {"PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    settings = [(f"jobs={j}", cores if j == "all" else int(j), {}) for j in args.jobs.split(",")]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.cluster_workers:
            procs, address, ready = start_dask(args.cluster_workers, {**os.environ, **env}, Path(tmp))
            settings.append((f"dask x{args.cluster_workers}", 1, {"LOTUS_CLUSTER": address}))
            print(f"local Dask cluster of {args.cluster_workers} workers ready in {ready:.2f} s")
        try:
            rows = measure(run, args, settings, env)
        finally:
            for p in reversed(procs):
                p.kill()
                p.wait()
    print(f"{args.events:,} events, {args.ranks} ranks, {args.nodes} nodes, {size / 2**30:.2f} GiB, {cores} CPUs here")
    print(f"{'command':8} {'setting':10} {'median s':>9} {'M events/s':>10} {'speed-up':>8} {'peak MiB':>9} "
          f"{'tree MiB':>9}  same output")
    for r in rows:
        print(f"{r['command']:8} {r['setting']:10} {r['seconds']:>9.2f} {r['events'] / r['seconds'] / 1e6:>10.1f} "
              f"{r['speedup']:>7.2f}x {r['peak_bytes'] / 2**20:>9.0f} {r['tree_peak_bytes'] / 2**20:>9.0f}  "
              f"{r['same_output']}")
    paper(rows, args)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    print(json.dumps({"events": args.events, "ranks": args.ranks, "nodes": args.nodes, "bytes": size, "cpus": cores,
                      "rows": rows}))


def in_turn(cmd: str, run: Path, engine: str, settings: list[tuple[str, int, dict]], repeat: int) -> list[dict]:
    """``lotus analyze CMD --json`` under each (name, jobs, environment) setting in turn, ``repeat`` rounds (the
    neighbours' load falls on every setting alike): per setting the median time, the speed-up over the first,
    the peaks (its own, and summed with its worker processes) and whether its outputs equal the first's."""
    res: dict[str, list] = {name: [] for name, _, _ in settings}
    digests: dict[str, set] = {name: set() for name, _, _ in settings}
    for _ in range(repeat):
        for name, jobs, env in settings:
            with tempfile.TemporaryFile() as out:
                if AT_ONCE in env:
                    dt, peak = at_once(cmd, run, engine, int(env[AT_ONCE]), out)
                else:
                    dt, peak = cli_once(cmd, run, engine, jobs=jobs, out=out, env=env)
                out.seek(0)
                digests[name].add(hashlib.sha256(out.read()).hexdigest())
            res[name].append((dt, peak))
    trees = {}
    for name, jobs, env in settings:  # the peak of the process tree: one more run each, not timed (cli_once)
        if AT_ONCE not in env:
            cli_once(cmd, run, engine, jobs=jobs, env=env, tree=True)
        trees[name] = 0 if AT_ONCE in env else cli_once.tree_peak
    first = settings[0][0]
    base = statistics.median(r[0] for r in res[first])
    copies = {name: int(env.get(AT_ONCE, 1)) for name, _, env in settings}

    def ratios(name):  # each round's own speed-up (the rounds ran in turn: a slow moment falls on both)
        return sorted(copies[name] * b[0] / r[0] for b, r in zip(res[first], res[name], strict=True))

    return [{"command": cmd, "setting": name, "jobs": jobs, "seconds": statistics.median(r[0] for r in res[name]),
             "speedup": copies[name] * base / statistics.median(r[0] for r in res[name]),
             "speedup_median_of_ratios": statistics.median(ratios(name)), "round_speedups": ratios(name),
             "runs": [r[0] for r in res[name]], "peak_bytes": max(r[1] for r in res[name]),
             "tree_peak_bytes": trees[name], "same_output": len(digests[name]) == 1 and digests[name] == digests[first]}
            for name, jobs, _ in settings]


AT_ONCE = "LOTUS_BENCH_AT_ONCE"  # a setting of in_turn: that many serial runs at once (at_once)


def at_once(cmd: str, run: Path, engine: str, copies: int, out) -> tuple[float, int]:
    """``copies`` serial runs of ``lotus analyze CMD`` started together, each pinned to its own CPU: (seconds until
    the last ends, the largest peak); the first one's ``--json`` goes to ``out``. Their speed-up (``copies`` x the
    serial time over this) is what this machine's CPUs give work that needs no merging: the ceiling of any scan
    on that many processes here."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(copies) as pool, tempfile.TemporaryFile() as sink:
        runs = [pool.submit(cli_once, cmd, run, engine, 1, out if i == 0 else sink, {"LOTUS_BENCH_CPU": str(i)})
                for i in range(copies)]
        got = [r.result() for r in runs]
    return max(g[0] for g in got), max(g[1] for g in got)


def jobs_bench(sizes: list[int], root: Path, repeat: int, engine: str, epochs: int, ranks: int,
               jobs: list[int]) -> dict:
    """Each command at each ``jobs`` value in turn (:func:`in_turn`)."""
    rows = []
    print(f"{'events':>12} {'ranks':>5} {'command':8} {'jobs':>4} {'median s':>9} {'speed-up':>8} {'of rounds':>9} "
          f"{'peak MiB':>9} {'tree MiB':>9}  same output")
    for n in sizes:
        run = root / (f"lotus_{n}" + (f"_e{epochs}" if epochs != 1 else "") + (f"_r{ranks}" if ranks != 1 else ""))
        if not run.exists():
            _generate(run, n, epochs, ranks)
        for p in run.iterdir():  # warm the page cache
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
        for cmd in ("stats", "verdict"):
            ceiling = [(f"{j}x1", j, {AT_ONCE: str(j)}) for j in jobs if j > 1]  # at_once: the machine's ceiling
            for row in in_turn(cmd, run, engine, [(f"jobs={j}", j, {}) for j in jobs] + ceiling, repeat):
                rows.append({"events": n, "ranks": ranks, **row})
                label = row["setting"].removeprefix("jobs=")
                print(f"{n:>12,} {ranks:>5} {cmd:8} {label:>4} {row['seconds']:>9.2f} {row['speedup']:>7.2f}x "
                      f"{row['speedup_median_of_ratios']:>8.2f}x {row['peak_bytes'] / 2**20:>9.0f} "
                      f"{row['tree_peak_bytes'] / 2**20:>9.0f}  {row['same_output']}")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    return {"engine": engine, "rows": rows}


def measure(run: Path, args, settings, env) -> list[dict]:
    settings = [(name, jobs, {**env, **extra}) for name, jobs, extra in settings]
    return [{**row, "events": args.events} for cmd in args.commands.split(",")
            for row in in_turn(cmd, run, "auto", settings, args.repeat)]


def paper(rows: list[dict], args) -> None:
    """What ``--paper-events`` cost on ``--paper-nodes`` x ``--paper-cores`` from the one-core rate measured here."""
    one = [r for r in rows if r["jobs"] == 1 and r["setting"].startswith("jobs")]
    if not one:
        return
    cores = args.paper_nodes * args.paper_cores
    print(f"on paper (extrapolated from the one-core rate measured here, not measured): {args.paper_events:.3g} "
          f"events on {args.paper_nodes} nodes x {args.paper_cores} cores")
    for r in one:
        rate = r["events"] / r["seconds"]
        print(f"  {r['command']:8} {rate / 1e6:.1f} M events/s a core -> {args.paper_events / rate / 3600:.2f} "
              f"core-hours; {args.paper_events / rate / cores:.0f} s on {cores} cores at perfect scaling")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
