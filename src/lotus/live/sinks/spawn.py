"""Start the sidecar (``python -m lotus.live.sinks``): from ``lotus run``'s launcher, or from a DataLoader.

One sidecar per trace directory follows the job's process and reads every rank's files there. It runs in
a session of its own (a Ctrl-C at the terminal does not cut its last publish short) at a lower CPU priority,
with stdin closed, its stderr the job's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from lotus import _env
from lotus.live.sinks.options import SinkOptions

_log = logging.getLogger("lotus.live.sinks")
FINISH_S = 30.0  # after the job: how long the launcher waits for the sidecar's last publish
_started: set[tuple[int, str]] = set()
_lock = threading.Lock()


def sidecar_command(run_dir: str | os.PathLike, options: SinkOptions, *, pid: int, since_ns: int | None,
                    job_cwd: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "lotus.live.sinks", os.path.abspath(run_dir), "--pid", str(pid), *options.argv()]
    if since_ns is not None:
        cmd += ["--since-ns", str(since_ns)]
    if job_cwd:
        cmd += ["--job-cwd", os.path.abspath(job_cwd)]
    return cmd


def start_sidecar(run_dir: Path, options: SinkOptions, *, pid: int, since_ns: int | None, job_cwd: str | None,
                  env: dict[str, str] | None = None) -> subprocess.Popen | None:
    """The launcher's way: a child it waits for at the end (:func:`finish_sidecar`). None (one line said
    why) when it cannot start."""
    try:
        return subprocess.Popen(sidecar_command(run_dir, options, pid=pid, since_ns=since_ns, job_cwd=job_cwd),
                                env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        _log.warning("cannot start the metrics sidecar (%s); no live metrics (the job runs on)", exc)
        return None


def sidecar_for_launch(options, trace_dir: Path, pid: int, run_doc: dict) -> subprocess.Popen | None:
    """:func:`start_sidecar` for :func:`lotus.launch.launch` (``options``: its LaunchOptions): follows the job
    ``pid`` with the job's environment; the sidecar's pid goes into ``run_doc`` (``lotus-run.json``)."""
    proc = start_sidecar(trace_dir, options.sinks, pid=pid, since_ns=run_doc["start_wall_ns"],
                         job_cwd=str(options.cwd or os.getcwd()), env={**os.environ, **options.env})
    run_doc["sidecar_pid"] = proc.pid if proc is not None else None
    return proc


def finish_sidecar(proc: subprocess.Popen | None, timeout_s: float = FINISH_S) -> None:
    """Wait for the sidecar's last publish (it ends on its own once the job's process is gone); stop it
    after ``timeout_s``."""
    if proc is None:
        return
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _log.warning("the metrics sidecar did not finish within %.0f s after the job; stopped", timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def ensure_for_loader(trace_dir: str, options: SinkOptions) -> bool:
    """The DataLoader's way (``live_sinks=`` or ``LOTUS_TENSORBOARD``...): start one sidecar per trace
    directory, not waited for (it ends after this process). Nothing when ``lotus run``'s sidecar
    (``LOTUS_SIDECAR=1``) or this process's parent's (``LOTUS_SIDECAR=<the directory>``, set here for the
    processes this one starts, an evaluation subprocess say) follows the directory already. Never raises;
    True when a sidecar was started."""
    try:
        directory = os.path.abspath(trace_dir)
        if os.environ.get(_env.SIDECAR) in ("1", directory) or not options.any:
            return False
        key = (os.getpid(), directory)
        with _lock:
            if key in _started:
                return False
            _started.add(key)
        from lotus.live.job import process_start_wall_ns

        pid = os.getpid()
        since = process_start_wall_ns(pid)  # when this process started: the job's start
        cmd = sidecar_command(trace_dir, options, pid=pid, since_ns=since if since and since > 0 else None,
                              job_cwd=os.getcwd())
        env = {k: v for k, v in os.environ.items() if k not in (_env.TENSORBOARD, _env.PROMETHEUS, _env.WANDB)}
        os.posix_spawn(sys.executable, cmd, env, setsid=True,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)])
        os.environ[_env.SIDECAR] = directory
        return True
    except Exception as exc:
        from lotus._warn import warn_once

        warn_once("sinks-start", f"lotus: cannot start the live metrics sidecar ({exc!r}); training continues")
        return False
