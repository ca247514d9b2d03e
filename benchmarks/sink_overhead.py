"""What the live sinks cost the training process. The sidecar (TensorBoard + Prometheus, publishing every
second: ten times the default rate) is another process, and the training process runs the same code with
or without it (tests/live/test_sinks_e2e.py checks that its environment differs only by a marker); what
can move is what the sidecar's CPU takes from the machine. Two measurements:

* ``blocks`` (default): ONE traced job under ``lotus run`` (benchmarks/jobs/text_loop.py: overhead_pairs.py's
  text pipeline, num_workers=0, so every batch is prepared on the training thread, which records each
  batch's CPU time and end) while this script starts a sidecar on its trace, stops it (SIGKILL), starts it
  again..., in blocks of ``--on`` / ``--off`` seconds. The sidecar's first second (its imports) is left out
  of each on-block, and half a second after each stop out of the off-block. Per block, the median batch CPU
  and wall time; per pair of neighbouring blocks, with/without; the median over quads (two pairs, one of
  each order) with a 95% bootstrap interval, as overhead_pairs.summarize does. One process: no spread
  between processes (memory layout, hash seeds) in the comparison.
* ``jobs``: whole jobs under ``lotus run`` without and with ``--tensorboard --prometheus`` (the launcher's
  own path), in alternating pairs; per job the median batch CPU and wall; the sidecar's CPU as the jobs'
  children CPU with minus without (start-up and last publish included).

    python benchmarks/sink_overhead.py                        # blocks, ~2.5 min on 2 cores
    python benchmarks/sink_overhead.py --mode jobs --pairs 10 # ~4 min
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_pairs as op

JOB = Path(__file__).resolve().parent / "jobs" / "text_loop.py"
ENV = {"PYTHONHASHSEED": "0"}  # one dict layout in every job: less spread between jobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sinks(tmp: Path, i: int):
    from lotus.live.sinks import SinkOptions

    return SinkOptions(tensorboard=str(tmp / f"tb{i}"), prometheus=f"127.0.0.1:{_free_port()}", period_s=1.0)


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _job(tmp: Path, i: int, batches: int, sinks=None, record: Path | None = None, on_start=None) -> dict:
    from lotus.launch import LaunchOptions, launch

    out = tmp / f"job{i}.json"
    cmd = [sys.executable, str(JOB), "--out", str(out), "--batches", str(batches)]
    if record is not None:
        cmd += ["--record", str(record)]
    cpu0 = _children_cpu_s()
    probe = launch(cmd, LaunchOptions(trace_dir=tmp / f"trace{i}", capture=True, sinks=sinks, env=ENV,
                                      on_start=on_start))
    if probe.exit_code != 0:
        raise SystemExit(f"job {i} failed: {probe.stderr_tail()}")
    return {**json.loads(out.read_text()), "children_cpu_s": _children_cpu_s() - cpu0, "sinks": sinks is not None}


def jobs(tmp: Path, pairs: int, batches: int) -> dict:
    runs = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        pair = {s: _job(tmp, 2 * i + k, batches, _sinks(tmp, 2 * i + k) if s else None) for k, s in enumerate(order)}
        runs.append(pair)
        print(f"pair {i}: without {pair[False]['cpu_ns'] / 1e3:.1f} us CPU, with {pair[True]['cpu_ns'] / 1e3:.1f} us; "
              f"loop {pair[False]['loop_s']:.1f} / {pair[True]['loop_s']:.1f} s", flush=True)
    result = {"mode": "jobs", "pairs": pairs, "batches": batches,
              "runs": [{"without": r[False], "with": r[True]} for r in runs]}
    for key in ("cpu_ns", "wall_ns"):
        result[key] = op.summarize([r[False][key] for r in runs], [r[True][key] for r in runs])
    side = [r[True]["children_cpu_s"] - r[False]["children_cpu_s"] for r in runs]
    result["sidecar_cpu_s"] = {"median": statistics.median(side), "ci95": list(op.bootstrap_median_ci(side)),
                               "loop_s": statistics.median(r[True]["loop_s"] for r in runs)}
    return result


def blocks(tmp: Path, on_s: float, off_s: float, cycles: int) -> dict:
    import numpy as np

    from lotus.live.sinks.spawn import start_sidecar

    started = threading.Event()
    pid: list[int] = []
    record = tmp / "record.npy"
    per_s = 5500  # batches a second on this VM (text, ~180 us): the job outlasts the blocks
    batches = int(per_s * (5 + cycles * (on_s + off_s + 1.5)))
    job = threading.Thread(target=lambda: _job(tmp, 0, batches, record=record,
                                               on_start=lambda p: (pid.append(p), started.set())))
    job.start()
    started.wait(60)
    time.sleep(5)  # torch imported, the loop running
    marks = []  # (on?, start ns, end ns)
    for c in range(cycles):
        for on in ((True, False) if c % 2 == 0 else (False, True)):
            if on:
                proc = start_sidecar(tmp / "trace0", _sinks(tmp, c), pid=pid[0], since_ns=None, job_cwd=None,
                                     env={**os.environ})
                time.sleep(1.0)  # its start-up: left out
                t0 = time.monotonic_ns()
                time.sleep(on_s)
                marks.append((True, t0, time.monotonic_ns()))
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            else:
                time.sleep(0.5)  # the stopped sidecar's last moments: left out
                t0 = time.monotonic_ns()
                time.sleep(off_s)
                marks.append((False, t0, time.monotonic_ns()))
    job.join()
    ends, cpu = np.load(record)
    wall = np.diff(ends, prepend=ends[0])
    med = []
    for on, a, b in marks:
        sel = (ends > a) & (ends <= b)
        med.append((on, float(np.median(cpu[sel])), float(np.median(wall[sel][1:])), int(sel.sum())))
    without = [m for m in med if not m[0]]
    with_ = [m for m in med if m[0]]
    # pair c is (on, off) for even c and (off, on) for odd c: summarize's order convention (a first on even)
    result = {"mode": "blocks", "on_s": on_s, "off_s": off_s, "cycles": cycles, "blocks": med,
              "batches_per_block": statistics.median(m[3] for m in med)}
    for key, k in (("cpu_ns", 1), ("wall_ns", 2)):
        result[key] = op.summarize([m[k] for m in without], [m[k] for m in with_])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("blocks", "jobs"), default="blocks")
    p.add_argument("--cycles", type=int, default=24, help="blocks: on/off pairs")
    p.add_argument("--on", type=float, default=2.0, help="blocks: seconds measured with the sidecar running")
    p.add_argument("--off", type=float, default=2.0, help="blocks: seconds measured without it")
    p.add_argument("--pairs", type=int, default=10, help="jobs: pairs of jobs")
    p.add_argument("--batches", type=int, default=30000, help="jobs: batches per job")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        result = blocks(Path(d), a.on, a.off, a.cycles) if a.mode == "blocks" else jobs(Path(d), a.pairs, a.batches)
    for key, what in (("cpu_ns", "per-batch CPU of the training thread"), ("wall_ns", "per-batch wall")):
        s = result[key]
        print(f"{what}: with/without {s['median_ratio'] - 1:+.2%} (95% CI {s['ratio_ci95'][0] - 1:+.2%} .. "
              f"{s['ratio_ci95'][1] - 1:+.2%}); {s['median_a_ns'] / 1e3:.1f} us without, "
              f"{s['median_b_ns'] / 1e3:.1f} us with")
    if "sidecar_cpu_s" in result:
        sc = result["sidecar_cpu_s"]
        print(f"sidecar CPU (children CPU with - without): {sc['median']:.2f} s a job (95% CI {sc['ci95'][0]:.2f} .. "
              f"{sc['ci95'][1]:.2f}) for a loop of {sc['loop_s']:.1f} s")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
