"""The sidecar's loop: follow the trace while the job runs, publish every period, and once more at the end.

Each sink runs in a thread of its own (:class:`SinkThread`) and only ever gets the latest values: a sink
that stalls holds up nothing but itself (its stale values are replaced, not queued), and one that fails
says so in one line and is dropped while the others go on. None of this runs in the training process.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lotus.live.sinks.options import SinkOptions
from lotus.live.sinks.values import RunValues, run_values

_log = logging.getLogger("lotus.live.sinks")
POLL_S = 1.0  # the trace is read every second (publishes are every period): reads stay small
CLOSE_S = 25.0  # how long the end waits for each sink's last publish and close

LABELS = {"tensorboard": "TensorBoard", "prometheus": "Prometheus", "wandb": "W&B"}


def reason(exc: BaseException) -> str:
    """An exception in one line."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class SinkThread:
    """One sink in its own thread; :meth:`submit` never blocks (the latest values replace unsent ones)."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.failed = False
        self._cond = threading.Condition()
        self._next: RunValues | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"lotus-sink-{sink.name}", daemon=True)
        self._thread.start()

    def submit(self, values: RunValues) -> None:
        with self._cond:
            self._next = values
            self._cond.notify()

    def request_close(self) -> None:
        """Publish what was submitted, then close the sink (in its thread; :meth:`join` waits for it)."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def join(self, timeout: float) -> bool:
        """False (and one line) when the sink did not finish within ``timeout``."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            label = LABELS.get(self.sink.name, self.sink.name)
            _log.warning("%s: no answer within %.0f s at the end; its last values may be missing", label, timeout)
            return False
        return True

    def _fail(self, exc: BaseException) -> None:
        if not self.failed:
            label = LABELS.get(self.sink.name, self.sink.name)
            _log.warning("%s: %s; no more %s metrics (the job runs on)", label, reason(exc), label)
        self.failed = True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._next is None and not self._closing:
                    self._cond.wait()
                values, self._next = self._next, None
                closing = self._closing
            if values is not None and not self.failed:
                try:
                    self.sink.publish(values)
                except Exception as exc:
                    self._fail(exc)
            if closing:
                try:
                    self.sink.close()
                except Exception as exc:
                    self._fail(exc)
                return


def open_sinks(options: SinkOptions, run_dir: Path, since_ns: int | None, job_cwd: str | None) -> list[SinkThread]:
    """The sinks ``options`` asks for; one that cannot open (package missing, port in use, directory not
    writable) says why in one line and is left out."""
    makers = []
    if options.tensorboard:
        def tensorboard():
            from lotus.live.sinks.to_tensorboard import TensorBoardSink

            return TensorBoardSink(options.tensorboard)
        makers.append(("tensorboard", tensorboard))
    if options.prometheus:
        def prometheus():
            from lotus.live.sinks.to_prometheus import PrometheusSink

            return PrometheusSink(options.prometheus)
        makers.append(("prometheus", prometheus))
    if options.wandb:
        def wandb():
            from lotus.live.sinks.to_wandb import WandbSink

            return WandbSink(run_dir, since_ns=since_ns, job_cwd=job_cwd, wait_s=max(options.period_s, 10.0))
        makers.append(("wandb", wandb))
    out = []
    for name, make in makers:
        label = LABELS[name]
        try:
            out.append(SinkThread(make()))
        except ImportError as exc:
            _log.warning("%s needs the %s package: pip install 'lotus-trace[%s]' (%s); no %s metrics (the job runs on)",
                         label, name, name, reason(exc), label)
        except Exception as exc:
            _log.warning("%s: %s; no %s metrics (the job runs on)", label, reason(exc), label)
    return out


@dataclass
class Follow:
    """What the sidecar follows: the run directory, and the job's process (its end is the job's end)."""

    run_dir: Path
    pid: int | None = None
    since_ns: int | None = None  # the process started before this (wall ns): a later one is a reused pid

    def live(self) -> bool:
        from lotus.live.job import job_status, pid_alive

        if self.pid is not None:
            return pid_alive(self.pid, self.since_ns)
        return job_status(self.run_dir).live


def publish_loop(follow: Follow, options: SinkOptions, sinks: list[SinkThread], stop: threading.Event) -> RunValues:
    """Publish every ``options.period_s`` while the job runs; then read the rest of the trace and publish the
    final values (also when ``stop`` is set). Returns them."""
    from lotus.live import Tailer

    tailer = Tailer(follow.run_dir)
    next_at = time.monotonic() + options.period_s
    while not stop.is_set():
        _poll(tailer)
        if not follow.live():
            break
        now = time.monotonic()
        if now >= next_at:
            _publish(tailer, options, sinks, live=True)
            next_at = max(next_at + options.period_s, now)
        stop.wait(min(POLL_S, max(0.0, next_at - time.monotonic())))
    _poll(tailer)
    final = _publish(tailer, options, sinks, live=False, final=True)
    for s in sinks:  # each sink finishes in its own thread: they close side by side
        s.request_close()
    deadline = time.monotonic() + CLOSE_S
    for s in sinks:
        s.join(max(0.0, deadline - time.monotonic()))
    return final


_warned: set[str] = set()


def _poll(tailer) -> None:
    try:
        tailer.poll()
    except Exception as exc:  # a damaged file: the next poll may do better; say it once
        if "poll" not in _warned:
            _warned.add("poll")
            _log.warning("reading the trace: %s", reason(exc))


def _publish(tailer, options: SinkOptions, sinks: list[SinkThread], *, live: bool, final: bool = False) -> RunValues:
    from lotus.live import snapshot

    state = tailer.state
    snap = snapshot(state, state.now_ns(live), options.window_s)
    values = run_values(state, snap, live=live, final=final)
    for s in sinks:
        s.submit(values)
    return values
