"""Local executor: every app is :func:`~lotus.submit.jobs.run_spec` (one :func:`lotus.launch.launch`) in a
thread of this process, started on the plan's schedule.

The launcher forwards signals only from the main thread; here launches run in other threads, so the
executor itself stops the apps: on Ctrl-C (SIGINT) or SIGTERM it sends SIGINT to the process group of
every app it started (the job's pid, as the launcher reports it when it starts), SIGKILL to what is
left after a few seconds (:func:`lotus.launch.runner.stop_group`), waits for the launches to return,
and raises :class:`Interrupted` carrying what every app gave. Traces stay where they are.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence

from lotus.submit.jobs import LaunchSpec, Outcome, run_spec

_log = logging.getLogger("lotus.submit")
STOP_WAIT_S = 5.0  # after SIGINT, how long an app's group has before SIGKILL


class Interrupted(Exception):
    """Ctrl-C / SIGTERM: every started app was stopped. ``outcomes``: per spec, None if never started."""

    def __init__(self, outcomes: list[Outcome | None]):
        super().__init__("interrupted")
        self.outcomes = outcomes


@contextlib.contextmanager
def sigterm_as_interrupt():
    """In the main thread: SIGTERM raises KeyboardInterrupt (as Ctrl-C does) while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _sleep(seconds: float) -> None:
    end = time.monotonic() + max(0.0, seconds)
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))


class LocalExecutor:
    """Runs specs as local processes (through the launcher), sequentially or concurrently."""

    name = "local"

    def __init__(self, on_start: Callable[[LaunchSpec], None] | None = None,
                 on_end: Callable[[LaunchSpec, Outcome], None] | None = None):
        self.on_start, self.on_end = on_start, on_end

    def run(self, specs: Sequence[LaunchSpec], *, concurrent: bool,
            delays_s: Sequence[float] | None = None) -> list[Outcome]:
        """Run ``specs``; ``delays_s[i]``: seconds before spec i starts, after the previous start
        (concurrent) or after the previous end (sequential). Raises :class:`Interrupted` on Ctrl-C."""
        specs = list(specs)
        delays = list(delays_s or [0.0] * len(specs))
        outcomes: list[Outcome | None] = [None] * len(specs)
        threads: dict[int, threading.Thread] = {}
        started_at: dict[int, float] = {}
        pids: dict[int, int] = {}  # the launcher's job pid (= process group) per started spec
        done: set[int] = set()  # not Thread.is_alive(): a join interrupted by Ctrl-C marks a live thread stopped

        def work(i: int) -> None:
            try:
                outcomes[i] = run_spec(specs[i], on_start=lambda pid: pids.__setitem__(i, pid))
            except Exception as exc:  # an app's trouble must not end the others
                _log.warning("%s: %s", specs[i].name, exc)
                outcomes[i] = Outcome(specs[i].name, specs[i].trace_dir, 1, None, started_at[i], error=str(exc))
            done.add(i)
            if self.on_end is not None:
                self.on_end(specs[i], outcomes[i])

        def start(i: int) -> None:
            if self.on_start is not None:
                self.on_start(specs[i])
            started_at[i] = time.time()
            t = threading.Thread(target=work, args=(i,), name=f"lotus-submit-{specs[i].name}", daemon=True)
            threads[i] = t
            t.start()

        def wait(indices) -> None:
            while any(i not in done for i in indices):
                time.sleep(0.1)

        try:
            with sigterm_as_interrupt():
                for i in range(len(specs)):
                    _sleep(delays[i])
                    start(i)
                    if not concurrent:
                        wait([i])
                wait(list(threads))
        except KeyboardInterrupt:
            self._stop([i for i in threads if i not in done], done, pids)
            raise Interrupted(outcomes) from None
        return [o if o is not None else Outcome(s.name, s.trace_dir, None, None, error="not started")
                for s, o in zip(specs, outcomes, strict=True)]

    def _stop(self, running: list[int], done: set[int], pids: dict[int, int]) -> None:
        """Stop every started app's process group; wait for their launches to return."""
        from lotus.launch.runner import stop_group

        _log.warning("interrupted: stopping %d app(s)", len(running))
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() \
            else None
        stopped: set[int] = set()
        stoppers: list[threading.Thread] = []
        deadline = time.monotonic() + STOP_WAIT_S + 30.0
        try:
            while any(i not in done for i in running) and time.monotonic() < deadline:
                for i in running:
                    if i in stopped or i in done:
                        continue
                    pid = pids.get(i)
                    if pid is None:
                        continue  # the launcher has not started it yet: next round
                    stopped.add(i)
                    s = threading.Thread(target=stop_group, args=(pid, signal.SIGINT, STOP_WAIT_S), daemon=True)
                    s.start()
                    stoppers.append(s)
                time.sleep(0.1)
            for s in stoppers:
                s.join(STOP_WAIT_S + 1.0)
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
