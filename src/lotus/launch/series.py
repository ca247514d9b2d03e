"""Probes of one job in one process (:class:`Series`): the launcher's side of :mod:`lotus.dataloader.series`.

:func:`lotus.launch.launch` starts the job once, in a thread, with ``$LOTUS_PROBE_SERIES`` naming a control
directory; the first probe's options are the launch's own. A probe is over when its marker appears in its
trace directory (the job then waits); :meth:`Series.probe` sends the next probe's trace directory, forced
settings and stop rule as ``next-K.json`` (written whole, by rename) and waits for that probe's marker. Each
probe's :class:`lotus.launch.runner.Probe` has its own trace directory and its wall time from the moment it was
asked for (the first: from the launch, start-up included). :meth:`Series.close` sends ``{"stop": true}`` and
waits for the job to end. When the job ends before a probe's marker (it finished its epochs, failed, or could
not switch), that probe is the job's end as :func:`launch` saw it, and the series is over (``alive`` False):
the caller launches the next probes as processes of their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

from lotus import _env
from lotus.launch.options import STEPS_MARKER, LaunchOptions, job_env
from lotus.launch.runner import Probe, launch, stop_group, stopped_by

_POLL_S = 0.02


class Series:
    """One job, probe after probe (see the module doc). ``command`` is launched at the first :meth:`probe`."""

    def __init__(self, command: list[str], control: str | os.PathLike, *, grace_s: float = 30.0):
        self.command, self.control, self.grace_s = list(command), Path(control), grace_s
        self.control.mkdir(parents=True, exist_ok=True)
        self.k = -1  # the probe running now
        self.pid: int | None = None
        self.result: Probe | None = None  # what launch() returned once the job ended
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stderr: Path | None = None
        self._stdout: Path | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def probe(self, options: LaunchOptions, timeout_s: float | None = None) -> Probe:
        """Run the next probe with ``options`` (trace_dir, workers, loader_args, steps and its stop rule are
        read; the first probe's options are the launch's) and return it once its marker is written."""
        trace_dir = Path(options.trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        for old in trace_dir.glob(f"{STEPS_MARKER}-*"):
            with contextlib.suppress(OSError):
                old.unlink()
        t0 = time.monotonic()
        self.k += 1
        if self._thread is None:
            self._start(dataclasses.replace(options, series=self.control, capture=True, timeout_s=None))
        else:
            if not self.alive:
                raise RuntimeError("the series' job has ended")
            env = job_env(options, trace_dir, base={})
            self._send({"env": {key: env.get(key) for key in _env.PROBE_KEYS}}, self.k)
        while True:
            if any(trace_dir.glob(f"{STEPS_MARKER}-*")):
                return Probe(command=self.command, trace_dir=trace_dir, exit_code=0, wall_s=time.monotonic() - t0,
                             steps_reached=True, workers=options.workers, steps=options.steps,
                             stopped_by=stopped_by(trace_dir), stdout_path=self._stdout, stderr_path=self._stderr,
                             cpus=options.cpus)
            if not self.alive:
                return self._ended(trace_dir, options, time.monotonic() - t0)
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                self.kill()
                return Probe(command=self.command, trace_dir=trace_dir, exit_code=124,
                             wall_s=time.monotonic() - t0, stopped="timeout", workers=options.workers,
                             steps=options.steps, stdout_path=self._stdout, stderr_path=self._stderr)
            time.sleep(_POLL_S)

    def close(self) -> Probe | None:
        """End the job (its current loop step finishes, then ``SystemExit(0)``) and wait for it."""
        if self._thread is None:
            return None
        if self.alive:
            self._send({"stop": True}, self.k + 1)
            self._thread.join(self.grace_s)
            if self.alive:
                self.kill()
        self._thread.join()
        return self.result

    def kill(self) -> None:
        if self.pid is not None:
            stop_group(self.pid, wait_s=2.0)
        if self._thread is not None:
            self._thread.join(self.grace_s)

    # -- internals ------------------------------------------------------------------------------------
    def _start(self, options: LaunchOptions) -> None:
        trace_dir = Path(options.trace_dir)
        self._stdout, self._stderr = trace_dir / "stdout.log", trace_dir / "stderr.log"
        started = threading.Event()
        user_hook = options.on_start

        def on_start(pid: int) -> None:
            self.pid = pid
            started.set()
            if callable(user_hook):
                user_hook(pid)

        def run() -> None:
            try:
                self.result = launch(self.command, dataclasses.replace(options, on_start=on_start))
            except BaseException as exc:  # raised again by the caller's next look at the series
                self._error = exc
            finally:
                started.set()

        self._thread = threading.Thread(target=run, name="lotus-series", daemon=True)
        self._thread.start()
        started.wait()
        if self._error is not None:
            raise self._error

    def _send(self, doc: dict, k: int) -> None:
        path = self.control / f"next-{k}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    def _ended(self, trace_dir: Path, options: LaunchOptions, wall_s: float) -> Probe:
        """The job ended before this probe's marker: the probe is what the launch saw."""
        if self._error is not None:
            raise self._error
        r = self.result
        code = r.exit_code if r is not None else 1
        return Probe(command=self.command, trace_dir=trace_dir, exit_code=code, wall_s=wall_s,
                     stopped=r.stopped if r is not None else None, workers=options.workers, steps=options.steps,
                     stdout_path=self._stdout, stderr_path=self._stderr, cpus=options.cpus)


__all__ = ["Series"]
