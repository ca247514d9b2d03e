"""lotus.live: follow a running job from the trace files it is writing (the library behind ``lotus top``).

::

    from lotus.live import Tailer, job_status, snapshot

    tailer = Tailer("lotus-runs/train-20250101-120000")   # reads only what is appended
    tailer.poll()
    status = job_status(tailer.run_dir)
    snap = snapshot(tailer.state, tailer.state.now_ns(status.live))
    snap["samples_per_s"], snap["loaders"][0]["wait_share"]

:class:`Tailer` keeps per-file offsets and a sliding window (:class:`LiveState`, the last 60 s);
:func:`snapshot` is a pure function of that state; :func:`job_status` says whether the job still runs.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

from lotus.live.job import JobStatus, default_root, job_status, local_boot_id, pid_alive, resolve_run_dir
from lotus.live.metrics import SNAPSHOT_VERSION, snapshot
from lotus.live.state import FileInfo, LiveState
from lotus.live.tail import FileTail, Tailer

__all__ = ["SNAPSHOT_VERSION", "FileInfo", "FileTail", "JobStatus", "LiveState", "Tailer", "default_root",
           "job_status", "local_boot_id", "pid_alive", "resolve_run_dir", "snapshot"]
