"""Probe mode (``lotus run --steps N``): end the job cleanly once a loader handed out N batches.

When the training loop asks a loader for batch N+1 (so the step of batch N is complete and recorded),
:func:`end_job` closes the epoch in the trace, stops this iterator's workers (their files get their
end records), closes every trace file of this process, leaves a marker file for the launcher, and
raises ``SystemExit(0)``: ``finally`` blocks and atexit handlers of the script run as on any exit.
The launcher stops a job that does not exit within its grace period (a thread that never ends).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lotus._env import STEPS_MARKER
from lotus.trace import schema as S


def end_job(lt, iterator) -> None:
    try:
        iterator._lotus_epoch_end(S.EPOCH_PROBE_END)
    except Exception:
        pass
    try:
        from lotus.dataloader import _torch_compat as compat

        compat.shutdown_workers(iterator)
    except Exception:
        pass
    try:
        from lotus.trace.writer import close_main_writers

        close_main_writers()
    except Exception:
        pass
    try:
        marker = Path(lt.trace_dir) / f"{STEPS_MARKER}-r{lt.rank}-p{os.getpid()}.json"
        marker.write_text(json.dumps({"pid": os.getpid(), "rank": lt.rank, "loader": lt.loader_id,
                                      "steps": lt.consumed, "wall_ns": time.time_ns()}))
    except Exception:
        pass
    raise SystemExit(0)
