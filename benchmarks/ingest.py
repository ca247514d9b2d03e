"""Ingestion benchmark: ``lotus.trace.load_events`` on generated traces of N events (default 5M), in the
original LotusTrace text format and in lotus's own binary format.

Each measurement runs in a fresh subprocess pinned to at most 2 CPUs: it imports lotus.trace, pandas and
pyarrow, notes its resident memory (VmRSS), times ``load_events(run)`` and reports the peak resident
memory (VmHWM) minus that baseline. The files are read once before timing (warm page cache). Reported:
median time over ``--repeat`` runs, events/s, and peak memory delta relative to the files' size.

    python benchmarks/ingest.py                 # 5M events, 3 runs per format
    python benchmarks/ingest.py --events 1000000 --repeat 5 --dir /tmp/lotus-bench

``--cli`` measures instead the commands end to end (issue 17: out-of-core analysis): for each size in
``--events`` (comma-separated), a synthetic lotus trace is generated once in ``--dir`` and
``lotus analyze stats`` and ``lotus analyze verdict`` run ``--repeat`` times each as a subprocess
(pinned to at most 2 CPUs; ``--engine`` sets ``$LOTUS_ENGINE``), reporting the median wall time and the
peak resident memory of that subprocess (``ru_maxrss`` from ``os.wait4``), and the slope of both in
the number of events::

    python benchmarks/ingest.py --cli --events 10000000,30000000,100000000 --dir /tmp/lotus17 --repeat 3

``--fit`` (with ``--cli``) measures instead the model's fitting, ``fit(RUN)`` (what ``lotus whatif`` does:
the run read only for the columns the fit needs; ``$LOTUS_BENCH_FIT=load_run`` times ``fit(load_run(RUN))``
instead, the whole run in DataFrames first, as a caller of that API asks), the same way;
``$LOTUS_BENCH_MODEL`` names a file for the fitted model's JSON (to compare engines or versions)::

    python benchmarks/ingest.py --cli --fit --events 10000000,100000000 --epochs 10 --dir /tmp/lotus17

``--commands`` (with ``--cli``; issue 25: every command end to end) names the commands to run instead of
stats and verdict, comma-separated, among: stats, verdict, wait, report, diff (the run against itself),
export (Parquet), plot (PNG), whatif (``--json``), fit (as ``--fit``), info; outputs go to a temporary
directory, removed after each run; ``$LOTUS_BENCH_SRC`` puts another source tree first on the child's
path (to time another version of lotus on the same traces, e.g. main's ``src``)::

    python benchmarks/ingest.py --cli --events 10000000,100000000 --epochs 10 --repeat 3 --dir /tmp/l25 \
        --commands stats,verdict,report,diff,export,plot,whatif,fit

``--jobs 1,2`` (with ``--cli``; issue 26: the scan on every core) runs each command once per value J,
pinned to the first J CPUs (``taskset -c 0`` for 1) with ``$LOTUS_JOBS=J``, in turn, ``--repeat`` times,
and reports besides the child's own peak (``VmHWM``) the peak of the summed resident memory of it and
its worker processes (sampled every 20 ms), the speed-up over J=1 (of the medians, and the median of each
round's own ratio: the rounds run the settings in turn) and whether the ``--json`` outputs are
byte-identical; ``--ranks R`` generates runs of R ranks. Beside them, "J x jobs=1 at once": J serial runs
started together, each pinned to its own CPU: what this machine's J CPUs give work that needs no merging at
all (its speed-up, J x the serial time over theirs, is the ceiling of any J-process scan here: on a VM whose
CPUs share a physical core or a host, J processes do not get J times one's speed)::

    python benchmarks/ingest.py --cli --events 100000000 --epochs 10 --jobs 1,2 --repeat 5 --dir /tmp/lotus26
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, time
if hasattr(os, "sched_setaffinity"):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    os.sched_setaffinity(0, cpus)
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
import numpy, pandas, pyarrow, pyarrow.csv
from lotus.trace import load_events
import lotus.trace.events, lotus.trace.original, lotus.trace.native
base = status("VmRSS")
t = time.perf_counter()
ev = load_events(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"events": len(ev), "seconds": dt, "peak_delta_bytes": status("VmHWM") - base,
                  "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}))
"""


def generate(root: Path, n_events: int) -> dict[str, Path]:
    from lotus.trace.synthetic import spec_for_events, write_native, write_original

    runs = {"original": root / f"original_{n_events}", "lotus": root / f"lotus_{n_events}"}
    if not runs["original"].exists():
        write_original(runs["original"], spec_for_events(n_events, "original", n_workers=4, batch_size=32))
    if not runs["lotus"].exists():
        write_native(runs["lotus"], spec_for_events(n_events, "lotus", n_workers=4, batch_size=32))
    return runs


def size_of(run: Path) -> int:
    return sum(p.stat().st_size for p in run.iterdir() if p.is_file())


def measure(run: Path, repeat: int) -> dict:
    for p in run.iterdir():  # warm the page cache
        p.read_bytes()
    results = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, str(run)], check=True, capture_output=True, text=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    secs = statistics.median(r["seconds"] for r in results)
    peak = statistics.median(r["peak_delta_bytes"] for r in results)
    size = size_of(run)
    return {"events": results[0]["events"], "seconds_median": secs, "events_per_s": results[0]["events"] / secs,
            "files_bytes": size, "peak_delta_bytes": peak, "peak_over_files": peak / size,
            "cpus": results[0]["cpus"], "runs": [r["seconds"] for r in results]}


def cli_once(cmd: str, run: Path, engine: str, jobs: int | None = None, out=None, env: dict | None = None,
             tree: bool = False) -> tuple[float, int]:
    """(seconds, peak RSS bytes) of ``lotus analyze CMD -d RUN`` in a fresh process.

    The peak is the child's own ``VmHWM`` at exit, written to a file: ``ru_maxrss`` from ``wait4`` also
    counts the parent's resident pages that a forked child holds until it execs (a parent that has just
    generated a large trace would inflate it). ``jobs``: pinned to that many CPUs with ``$LOTUS_JOBS``;
    ``out``: a file for its ``--json`` output; ``env``: more environment; ``tree``: also the peak of it and its
    worker processes together (``cli_once.tree_peak``), sampled every 20 ms by a thread of this process: a run
    timed with it shares the CPUs with the sampler (on 2 CPUs: +0.2-0.3 s of 3 s), so it is not timed with it."""
    import time

    with tempfile.NamedTemporaryFile("r", suffix=".hwm") as hwm:
        env = {**os.environ, **(env or {}), "LOTUS_ENGINE": engine, "LOTUS_BENCH_HWM": hwm.name}
        cpus = 2 if jobs is None else jobs
        if jobs is not None:
            env["LOTUS_JOBS"] = str(jobs)
        pre = ("import os, atexit\n"
               "_cpus = sorted(os.sched_getaffinity(0))\n"
               f"os.sched_setaffinity(0, _cpus[:{cpus}])\n"
               "if os.environ.get('LOTUS_BENCH_CPU'):\n"  # one copy of several at once (scale.at_once)
               "    os.sched_setaffinity(0, [_cpus[int(os.environ['LOTUS_BENCH_CPU'])]])\n"
               "def _hwm():\n"
               "    kb = [int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
               "    open(os.environ['LOTUS_BENCH_HWM'], 'w').write(str(kb * 1024))\n"
               "atexit.register(_hwm)\n")
        if os.environ.get("LOTUS_BENCH_SRC"):
            pre = f"import sys\nsys.path.insert(0, {os.environ['LOTUS_BENCH_SRC']!r})\n" + pre
        pre += _FIT if cmd == "fit" else "from lotus.cli import main\nmain()\n"
        scratch = tempfile.TemporaryDirectory(prefix="lotus-bench-", dir=os.environ.get("LOTUS_BENCH_OUT"))
        t = time.perf_counter()
        args = _command_args(cmd, run, Path(scratch.name)) + (["--json"] if out is not None else [])
        p = subprocess.Popen([sys.executable, "-c", pre, *args], env=env,
                             stdout=subprocess.DEVNULL if out is None else out, stderr=subprocess.PIPE)
        tree = _TreePeak(p.pid) if tree else None
        _, status, usage = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        if tree is not None:
            cli_once.tree_peak = tree.stop()
        if status != 0:
            raise SystemExit(f"lotus analyze {cmd} failed on {run}: {p.stderr.read().decode()[-500:]}")
        text = Path(hwm.name).read_text().strip()
        scratch.cleanup()
    return dt, int(text) if text else usage.ru_maxrss * 1024


def _command_args(cmd: str, run: Path, out: Path) -> list[str]:
    """The lotus command line of ``cmd`` on ``run`` (see ``--commands``); outputs under ``out``."""
    if cmd in ("stats", "verdict", "wait", "fit", "ranks"):
        return ["analyze", cmd, "-d", str(run)]
    return {"report": ["report", "-d", str(run), "-o", str(out / "report.html")],
            "diff": ["diff", str(run), str(run)],
            "export": ["export", "-d", str(run), "-o", str(out)],
            "plot": ["plot", "-d", str(run), "-o", str(out), "--format", "png"],
            "whatif": ["whatif", "-d", str(run), "--json"],
            "info": ["info", "-d", str(run)]}[cmd]


class _TreePeak:
    """The peak of the summed resident memory of a process and its descendants, sampled every 20 ms."""

    def __init__(self, pid: int):
        import threading

        import psutil

        self.peak, self.done = 0, threading.Event()
        self.proc = psutil.Process(pid)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        while not self.done.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs))
            except psutil.Error:
                pass
            self.done.wait(0.02)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.peak


_FIT = ("import sys\n"
        "from lotus.model import fit, load_run\n"
        "model = fit(load_run(sys.argv[4]) if os.environ.get('LOTUS_BENCH_FIT') == 'load_run' else sys.argv[4])\n"
        "if os.environ.get('LOTUS_BENCH_MODEL'):\n"
        "    from lotus.analysis.jsonutil import dumps\n"
        "    open(os.environ['LOTUS_BENCH_MODEL'], 'w').write(dumps(model.to_dict()))\n")


def _generate(run: Path, n: int, epochs: int, ranks: int = 1) -> None:
    """The synthetic run, written by a child process (so that this process stays small)."""
    code = ("import sys\nfrom lotus.trace.synthetic import spec_for_events, write_native\n"
            "write_native(sys.argv[1], spec_for_events(int(sys.argv[2]), 'lotus', n_workers=4, batch_size=32, "
            "epochs=int(sys.argv[3]), ranks=int(sys.argv[4])))\n")
    subprocess.run([sys.executable, "-c", code, str(run), str(n), str(epochs), str(ranks)], check=True)


def cli_bench(sizes: list[int], root: Path, repeat: int, engine: str, epochs: int = 1,
              commands=("stats", "verdict")) -> dict:
    rows = []
    print(f"{'events':>12} {'GiB':>6} {'command':8} {'median s':>9} {'peak MiB':>9}  engine={engine}")
    for n in sizes:
        run = root / (f"lotus_{n}" if epochs == 1 else f"lotus_{n}_e{epochs}")
        if not run.exists():  # generated one epoch at a time (memory: one epoch's arrays)
            _generate(run, n, epochs)
        for p in run.iterdir():  # warm the page cache
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
        for cmd in commands:
            res = [cli_once(cmd, run, engine) for _ in range(repeat)]
            row = {"events": n, "bytes": size_of(run), "command": cmd, "seconds": statistics.median(r[0] for r in res),
                   "peak_bytes": max(r[1] for r in res), "runs": [r[0] for r in res]}
            rows.append(row)
            print(f"{n:>12,} {row['bytes'] / 2**30:>6.2f} {cmd:8} {row['seconds']:>9.2f} "
                  f"{row['peak_bytes'] / 2**20:>9.0f}")
    for cmd in commands:
        r = [x for x in rows if x["command"] == cmd]
        # the smallest size's peak is often the scan's fixed per-chunk memory: the last two sizes say more
        for a, b in sorted({(0, len(r) - 1), (max(len(r) - 2, 0), len(r) - 1)}):
            if a == b:
                continue
            dn = (r[b]["events"] - r[a]["events"]) / 1e6
            print(f"{cmd}: slope {r[a]['events'] / 1e6:g}M -> {r[b]['events'] / 1e6:g}M: "
                  f"{(r[b]['seconds'] - r[a]['seconds']) / dn:.3f} s and "
                  f"{(r[b]['peak_bytes'] - r[a]['peak_bytes']) / 2**20 / dn:.2f} MiB per million events")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    return {"engine": engine, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="5000000", help="events (comma-separated sizes with --cli)")
    ap.add_argument("--cli", action="store_true", help="time `lotus analyze stats/verdict` end to end (see above)")
    ap.add_argument("--fit", action="store_true", help="with --cli: time the model's fitting instead (see above)")
    ap.add_argument("--engine", default="auto", choices=["auto", "memory", "scan"], help="with --cli")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1,
                    help="with --cli: epochs of the synthetic run (1B events fit in memory as 10 epochs)")
    ap.add_argument("--dir", type=Path, default=None, help="where to generate traces (kept); default a temp dir")
    ap.add_argument("--commands", default="", help="with --cli: commands to time (see above)")
    ap.add_argument("--jobs", default="", help="with --cli: comma-separated process counts to compare (see above)")
    ap.add_argument("--ranks", type=int, default=1, help="with --jobs: ranks of the synthetic run")
    args = ap.parse_args()
    ctx = tempfile.TemporaryDirectory() if args.dir is None else None
    root = Path(ctx.name) if ctx else args.dir
    root.mkdir(parents=True, exist_ok=True)
    if args.cli and args.jobs:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from scale import jobs_bench  # issue 26's benchmarks live there

        try:
            print(json.dumps(jobs_bench([int(x) for x in args.events.split(",")], root, args.repeat, args.engine,
                                        args.epochs, args.ranks, [int(x) for x in args.jobs.split(",")])))
        finally:
            if ctx:
                ctx.cleanup()
        return
    if args.cli:
        try:
            print(json.dumps(cli_bench([int(x) for x in args.events.split(",")], root, args.repeat, args.engine,
                                         args.epochs, ("fit",) if args.fit else
                                         tuple(args.commands.split(",")) if args.commands else ("stats", "verdict"))))
        finally:
            if ctx:
                ctx.cleanup()
        return
    args.events = int(args.events)
    try:
        runs = generate(root, args.events)
        report = {}
        print(f"{'format':10} {'events':>10} {'median s':>9} {'events/s':>12} {'files MB':>9} {'peak MB':>8} "
              f"{'peak/files':>10}  cpus")
        for fmt, run in runs.items():
            r = measure(run, args.repeat)
            report[fmt] = r
            print(f"{fmt:10} {r['events']:>10,} {r['seconds_median']:>9.2f} {r['events_per_s']:>12,.0f} "
                  f"{r['files_bytes'] / 2**20:>9.0f} {r['peak_delta_bytes'] / 2**20:>8.0f} "
                  f"{r['peak_over_files']:>10.2f}  {r['cpus']}")
        print(json.dumps(report))
    finally:
        if ctx:
            ctx.cleanup()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
