"""Does the scan's parallel path cost CPU that the serial one does not? (issue 26: the 2-core speed-up)

In one process, in turn, ``ROUNDS`` times, on one run of trace files: (1) the serial scan (``scan_files`` of every
file, this process's CPU time); (2) the parallel path's parts scanned one after the other in this process (the
plan of 2 processes, each part with its replay record, handed through ``/dev/shm`` and read back: this process's
CPU); (3) the same parts on a pool of 2 forked processes (the children's CPU time, and the wall time). (2)/(1) is
what cutting the scan into parts costs; (3)/(2) what two processes scanning at once cost each other (the machine's
shared memory and caches: the "2x1" ceiling of benchmarks/ingest.py is the same effect on whole commands).

    taskset -c 0,1 python benchmarks/scan_pool_cpu.py /tmp/l25/lotus_100000000_e10 6
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import replace

from lotus.query import parallel
from lotus.query.batchparts import SUMMARY_COLUMNS
from lotus.query.handoff import handoff_dir, receive, send
from lotus.query.scanfiles import ScanContext, scan_files
from lotus.query.scanplan import plan, scan_task
from lotus.trace.discover import find_run
from lotus.trace.events import readable_native


def main(path: str, rounds: int) -> None:
    good, offsets, per_process = readable_native(find_run(path))
    ctx = ScanContext(path, offsets, per_process, True, frozenset(SUMMARY_COLUMNS), True, False, op_reduce="")
    tasks = [(t, replace(ctx, replay=True)) for t in plan(good, 10, jobs=2)]

    def serial() -> float:
        t = time.process_time()
        scan_files(good, ctx)
        return time.process_time() - t

    def parts() -> float:
        t = time.process_time()
        with handoff_dir() as where:
            for task in tasks:
                receive(send(scan_task(task), where))
        return time.process_time() - t

    def pool() -> tuple[float, float]:
        c0, w0 = os.times(), time.monotonic()
        with parallel.settings(jobs=2):  # the pool the commands use (lotus.query.parallel.map_tasks)
            for _ in parallel.map_tasks(scan_task, tasks, [1 << 40] * len(tasks)):
                pass
        c1 = os.times()
        return c1.children_user + c1.children_system - c0.children_user - c0.children_system, time.monotonic() - w0

    rows = []
    for i in range(rounds):
        a, b = serial(), parts()
        c, wall = pool()
        rows.append((a, b, c))
        print(f"round {i}: serial {a:.2f}  parts in one process {b:.2f}  pool's children {c:.2f} (wall {wall:.2f})  "
              f"parts/serial {b / a:.3f}  pool/parts {c / b:.3f}", flush=True)
    print("median of the rounds' ratios: parts/serial", round(statistics.median(r[1] / r[0] for r in rows), 3),
          "pool/parts", round(statistics.median(r[2] / r[1] for r in rows), 3),
          "pool/serial", round(statistics.median(r[2] / r[0] for r in rows), 3))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6)
