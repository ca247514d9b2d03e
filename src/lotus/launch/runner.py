"""Start a command traced by lotus, wait for it, and say what happened (:func:`launch` -> :class:`Probe`).

The job runs in its own process group (so that stopping it stops its DataLoader workers and torchrun's
ranks too), with the environment of :func:`lotus.launch.options.job_env` and, with ``cpus``, an
affinity mask that every process it starts inherits. The launcher writes ``lotus-run.json`` in the
trace directory (command, pid, host, start; then end and exit code), which ``lotus top`` reads to know
whether the job is alive. Ctrl-C / SIGTERM reach the whole group; a second Ctrl-C kills it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus._cpus import allowed as allowed_cpus
from lotus.errors import LotusError
from lotus.launch.options import RUN_FILE, STEPS_MARKER, LaunchOptions, default_trace_dir, format_cpus, job_env
from lotus.trace.header import boot_id

_log = logging.getLogger("lotus.launch")
_POLL_S = 0.2
_TAIL_BYTES = 4000


class CommandNotFound(LotusError):
    """The command to launch does not exist (the CLI exits 127, as a shell does)."""


class LaunchError(LotusError):
    """The launch itself is impossible (bad CPU list, unwritable trace directory...)."""


@dataclass
class Probe:
    """What one launch gave: exit code, where the trace is, and (lazily) what the trace says."""

    command: list[str]
    trace_dir: Path | None
    exit_code: int
    wall_s: float
    steps_reached: bool = False
    stopped: str | None = None  # "grace" (did not exit after --steps), "timeout", "interrupt"
    cpus: list[int] | None = None
    workers: int | None = None
    steps: int | None = None
    stopped_by: str | None = None  # a probe: "steps" (its cap), "precision" (interval narrow enough), "time"
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    _summary: dict | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def stderr_tail(self, n_bytes: int = _TAIL_BYTES) -> str:
        """The end of the job's stderr (only when it was captured)."""
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        with open(self.stderr_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - n_bytes))
            return f.read().decode(errors="replace")

    def summary(self) -> dict:
        """Throughput and wait share from the trace (see :func:`lotus.analysis.throughput.run_summary`)."""
        if self._summary is None:
            from lotus.analysis.throughput import summarize_run

            self._summary = summarize_run(self.trace_dir) if self.trace_dir is not None else {"traced": False}
        return self._summary

    @property
    def samples_per_s(self) -> float | None:
        return self.summary().get("samples_per_s")

    @property
    def ci95(self) -> list[float] | None:
        return self.summary().get("ci95")

    @property
    def wait_share(self) -> float | None:
        return self.summary().get("wait_share")


def resolve_command(command: list[str]) -> list[str]:
    """The command with its program checked: CommandNotFound when it cannot be run."""
    if not command:
        raise LaunchError("no command given")
    command = [os.fspath(c) if isinstance(c, os.PathLike) else str(c) for c in command]
    prog = command[0]
    if os.sep in prog:
        if not (os.path.isfile(prog) and os.access(prog, os.X_OK)):
            raise CommandNotFound(f"{prog}: command not found (or not executable)")
        return list(command)
    if shutil.which(prog) is None:
        raise CommandNotFound(f"{prog}: command not found")
    return list(command)


def check_cpus(cpus: list[int] | None) -> None:
    if not cpus:
        return
    allowed = allowed_cpus()
    bad = sorted(set(cpus) - set(allowed))
    if bad:
        raise LaunchError(f"CPU(s) {format_cpus(bad)} not available to this process (allowed: {format_cpus(allowed)})")




def _write_run_file(trace_dir: Path, doc: dict) -> None:
    tmp = trace_dir / f".{RUN_FILE}.tmp"
    try:
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, trace_dir / RUN_FILE)
    except OSError as exc:
        _log.warning("cannot write %s: %s", trace_dir / RUN_FILE, exc)


def _steps_reached(trace_dir: Path | None) -> bool:
    return trace_dir is not None and any(trace_dir.glob(f"{STEPS_MARKER}-*"))


def stopped_by(trace_dir: Path | None) -> str | None:
    """Why a probe ended (``steps``, ``precision``, ``time``; the first rank's marker), None if it did not."""
    if trace_dir is None:
        return None
    for marker in sorted(Path(trace_dir).glob(f"{STEPS_MARKER}-*")):
        try:
            return json.loads(marker.read_text()).get("stopped_by") or "steps"
        except (OSError, ValueError, AttributeError):
            return "steps"
    return None


def _terminal() -> int | None:
    """The fd of our controlling terminal when we are its foreground process group (else None)."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _give_terminal(fd: int, pgid: int) -> None:
    """Make ``pgid`` the terminal's foreground group (as a shell does for a job)."""
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not call tcsetpgrp otherwise
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


def _preexec(cpus: list[int] | None, tty: int | None):
    def run() -> None:
        os.setpgid(0, 0)  # own process group: stopping the job stops its workers and ranks
        if tty is not None:
            _give_terminal(tty, os.getpgrp())  # the job reads the terminal and gets Ctrl-C as usual
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the launcher forwards Ctrl-C: the job must not ignore it
        if cpus:
            os.sched_setaffinity(0, cpus)

    return run


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(pgid: int, first: int = signal.SIGTERM, wait_s: float = 5.0) -> None:
    """Signal a process group, then SIGKILL what is left after ``wait_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, first)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _Signals:
    """While the job runs: SIGINT/SIGTERM to the launcher go to the job's group (twice: SIGKILL)."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self.count = 0
        self.old: dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.old[sig] = signal.signal(sig, self._forward)
        return self

    def _forward(self, signum, frame) -> None:
        self.count += 1
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum if self.count == 1 else signal.SIGKILL)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)


def launch(command: list[str], options: LaunchOptions | None = None) -> Probe:
    """Run ``command`` traced by lotus and wait for it. Raises CommandNotFound / LaunchError before
    starting anything when the command or the options cannot work; otherwise returns a Probe whatever
    the job did (its exit code: the command's, or 128+signal, or 124 on ``timeout_s``)."""
    options = options or LaunchOptions()
    command = resolve_command(command)
    check_cpus(options.cpus)
    if options.steps is not None and not options.trace:
        raise LaunchError("--steps needs tracing (it counts the batches lotus's DataLoader hands out)")
    if (options.precision or options.max_seconds or options.below) and options.steps is None:
        raise LaunchError("--precision, --max-seconds and --below end a probe early: give its cap with --steps")
    if options.below is not None and not options.below > 0:
        raise LaunchError(f"--below must be a rate above 0 (samples/s), not {options.below}")
    if options.precision is not None and not 0 < options.precision < 1:
        raise LaunchError(f"--precision must be between 0 and 1 (0.03 = +-3%), not {options.precision}")
    trace_dir = None
    if options.trace or options.trace_dir is not None or options.capture:
        trace_dir = Path(options.trace_dir) if options.trace_dir is not None else default_trace_dir(command)
        try:
            trace_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"cannot create the trace directory {trace_dir}: {exc.strerror or exc}") from None
        for old in trace_dir.glob(f"{STEPS_MARKER}-*"):  # a previous probe into the same directory
            with contextlib.suppress(OSError):
                old.unlink()
        earlier = sum(1 for _ in itertools.islice(trace_dir.glob("*.lotustrace*"), 10_000))
        if earlier:  # kept (never deleted for the user), but every analysis of the directory reads them too
            _log.warning("%s already holds %s trace file(s) of an earlier run: analyses of it will read that run's "
                         "batches with this one's (give a new or empty directory)", trace_dir,
                         f"{earlier:,}" if earlier < 10_000 else "10,000+")
    env = job_env(options, trace_dir)
    out = err = None
    stdout_path = stderr_path = None
    if options.capture and trace_dir is not None:
        stdout_path, stderr_path = trace_dir / "stdout.log", trace_dir / "stderr.log"
        out, err = open(stdout_path, "wb"), open(stderr_path, "wb")  # noqa: SIM115 - closed below
    run_doc = {"version": 1, "command": command, "pid": None, "hostname": socket.gethostname(),
               "boot_id": boot_id(), "start_wall_ns": time.time_ns(), "end_wall_ns": None, "exit_code": None,
               "steps": options.steps, "precision": options.precision, "max_seconds": options.max_seconds,
               "below": options.below, "workers": options.workers,
               "cpus": format_cpus(options.cpus) if options.cpus else None, "cwd": str(options.cwd or os.getcwd())}
    t0 = time.monotonic()
    tty = _terminal() if threading.current_thread() is threading.main_thread() else None
    try:
        proc = subprocess.Popen(command, env=env, cwd=options.cwd, stdout=out, stderr=err,
                                preexec_fn=_preexec(options.cpus, tty))  # noqa: PLW1509 - setpgid/affinity only
    except FileNotFoundError:
        raise CommandNotFound(f"{command[0]}: command not found") from None
    except OSError as exc:
        raise LaunchError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    finally:
        for f in (out, err):
            if f is not None:
                f.close()
    run_doc["pid"] = proc.pid
    sidecar = None
    if options.sinks is not None and options.trace and trace_dir is not None:  # live metrics (lotus.live.sinks)
        from lotus.live.sinks.spawn import sidecar_for_launch

        sidecar = sidecar_for_launch(options, trace_dir, proc.pid, run_doc)
    if trace_dir is not None:
        _write_run_file(trace_dir, run_doc)
    if callable(options.on_start):
        try:
            options.on_start(proc.pid)
        except Exception as exc:  # the caller's hook must not orphan the job
            _log.warning("on_start hook failed: %r", exc)
    stopped = None
    steps_seen_at = None
    with _Signals(proc.pid) as sig:
        while True:
            try:
                rc = proc.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if options.steps is not None and options.series is None and steps_seen_at is None \
                    and _steps_reached(trace_dir):  # a series' job waits after each probe (lotus.launch.series)
                steps_seen_at = now
            if steps_seen_at is not None and now - steps_seen_at > options.grace_s:
                _log.warning("the job did not exit %.0f s after reaching --steps; stopping it", options.grace_s)
                stopped = "grace"
                stop_group(proc.pid)
            elif options.timeout_s is not None and now - t0 > options.timeout_s and stopped is None:
                stopped = "timeout"
                stop_group(proc.pid)
        if sig.count or (tty is not None and rc in (-signal.SIGINT, 128 + signal.SIGINT, 130)):
            stopped = "interrupt"
    if tty is not None:
        _give_terminal(tty, os.getpgrp())  # the terminal is ours again
    wall = time.monotonic() - t0
    if _group_alive(proc.pid):  # workers or daemons the job left behind
        stop_group(proc.pid, wait_s=2.0)
    steps_reached = options.steps is not None and _steps_reached(trace_dir)
    if stopped == "timeout":
        code = 124
    elif stopped == "grace" and steps_reached:
        code = 0
    else:
        code = rc if rc >= 0 else 128 - rc
    ended_by = stopped_by(trace_dir) if steps_reached else None
    run_doc.update(end_wall_ns=time.time_ns(), exit_code=code, returncode=rc, stopped=stopped,
                   steps_reached=steps_reached, stopped_by=ended_by, wall_s=wall)
    if trace_dir is not None:
        _write_run_file(trace_dir, run_doc)
    if sidecar is not None:
        from lotus.live.sinks.spawn import finish_sidecar

        finish_sidecar(sidecar)  # its last publish (it ends once the job's process is gone)
    return Probe(command=command, trace_dir=trace_dir if options.trace else None, exit_code=code, wall_s=wall,
                 steps_reached=steps_reached, stopped=stopped, cpus=options.cpus, workers=options.workers,
                 steps=options.steps, stopped_by=ended_by, stdout_path=stdout_path, stderr_path=stderr_path)
