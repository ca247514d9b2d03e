"""``python -m lotus.live.sinks RUN_DIR [--tensorboard DIR] [--prometheus [HOST:]PORT] [--wandb] ...``: the sidecar.

Started by ``lotus run --tensorboard/--prometheus/--wandb`` and by a DataLoader with ``live_sinks=`` (or
``LOTUS_TENSORBOARD``...); can also follow a run started otherwise (``--pid`` of its process, or without it
until ``lotus top`` would call the job ended). Exit code 0 whatever the sinks did: their problems are one
line each on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lotus.live.sinks", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--tensorboard", metavar="DIR")
    p.add_argument("--prometheus", metavar="[HOST:]PORT")
    p.add_argument("--wandb", action="store_true")
    p.add_argument("--period", type=float, default=10.0, help="seconds between publishes")
    p.add_argument("--window", type=float, default=10.0, help="seconds over which rates and shares are computed")
    p.add_argument("--pid", type=int, default=None, help="the job's process: its end is the job's end")
    p.add_argument("--since-ns", type=int, default=None, help="when the job started (wall ns)")
    p.add_argument("--job-cwd", default=None, help="the job's working directory (where its wandb/ directory is)")
    p.add_argument("--nice", type=int, default=10, help="lower the sidecar's CPU priority by this much")
    a = p.parse_args(argv)
    logging.basicConfig(format="lotus: %(message)s", level=logging.WARNING, stream=sys.stderr)
    from lotus.live.sinks.options import SinkOptions
    from lotus.live.sinks.publisher import Follow, open_sinks, publish_loop

    try:
        options = SinkOptions(tensorboard=a.tensorboard, prometheus=a.prometheus, wandb=a.wandb,
                              period_s=a.period, window_s=a.window)
    except ValueError as exc:
        logging.getLogger("lotus.live.sinks").warning("%s; no live metrics (the job runs on)", exc)
        return 0
    if a.nice:
        try:
            os.nice(a.nice)
        except OSError:
            pass
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sinks = open_sinks(options, a.run_dir, a.since_ns, a.job_cwd)
    if sinks:
        publish_loop(Follow(a.run_dir, a.pid, a.since_ns), options, sinks, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
