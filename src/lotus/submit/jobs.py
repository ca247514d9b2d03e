"""One app run = one :func:`lotus.launch.launch` call, described by a picklable :class:`LaunchSpec`.

:func:`run_spec` is what every executor runs: in a thread of ``lotus submit`` (local) or inside a Slurm
allocation (submitit pickles the function and the spec), so traces look the same either way. It returns
an :class:`Outcome` of plain values (no open files, no DataFrames).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace

_log = logging.getLogger("lotus.submit")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything one launch needs (picklable)."""

    name: str
    command: tuple[str, ...]
    trace_dir: str
    workers: int | None = None  # LaunchOptions.workers (per rank)
    cpus: tuple[int, ...] | None = None  # affinity (local executor); Slurm decides inside an allocation
    env: dict[str, str] = field(default_factory=dict)
    steps: int | None = None
    timeout_s: float | None = None
    cwd: str | None = None
    precision: float | None = None  # a probe: ends once its samples/s is known to +-this (the one protocol)
    max_seconds: float | None = None
    n_cpus: int | None = None  # CPUs the app should have (Slurm: cpus_per_task)
    gpus: int = 0  # GPUs the app should have (Slurm: gpus_per_node)
    kind: str = "app"  # "app", or "probe" (a workers=auto profiling probe)

    def for_slurm(self) -> LaunchSpec:
        """The spec as run inside a Slurm allocation: Slurm sets the affinity and CUDA_VISIBLE_DEVICES;
        paths absolute, the submitting directory as working directory (as locally)."""
        env = {k: v for k, v in self.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        return replace(self, cpus=None, env=env, trace_dir=os.path.abspath(self.trace_dir),
                       cwd=os.path.abspath(self.cwd or os.getcwd()))


@dataclass
class Outcome:
    """What one launch gave. ``exit_code`` None: the app never started."""

    name: str
    trace_dir: str
    exit_code: int | None
    wall_s: float | None
    started_wall_s: float | None = None  # time.time() at the start
    stopped: str | None = None  # the launcher's: "grace", "timeout", "interrupt"
    samples_per_s: float | None = None
    wait_share: float | None = None
    ci95: list[float] | None = None  # 95% interval of samples_per_s (the one measure)
    stopped_by: str | None = None  # a probe: why it ended (precision, steps, time; None: the job ended)
    note: str | None = None  # the rate's note (an interval wider than the target, a short window...)
    traced: bool = False
    stderr_tail: str = ""
    error: str | None = None  # why it did not start / what went wrong around it
    host: str | None = None
    job_id: str | None = None  # Slurm job id

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def run_spec(spec: LaunchSpec, on_start=None) -> Outcome:
    """Launch ``spec`` through :func:`lotus.launch.launch`, wait, and summarise its trace.
    ``on_start(pid)``: called when the job started (its pid is its process group)."""
    from lotus.launch import LaunchOptions, launch
    from lotus.launch.runner import CommandNotFound, LaunchError

    opts = LaunchOptions(trace_dir=spec.trace_dir, workers=spec.workers,
                         cpus=list(spec.cpus) if spec.cpus else None, env=dict(spec.env), steps=spec.steps,
                         precision=spec.precision if spec.steps else None,
                         max_seconds=spec.max_seconds if spec.steps and spec.precision else None,
                         capture=True, timeout_s=spec.timeout_s, cwd=spec.cwd, on_start=on_start)
    started = time.time()
    host = socket.gethostname()
    try:
        probe = launch(list(spec.command), opts)
    except CommandNotFound as exc:
        return Outcome(spec.name, spec.trace_dir, 127, 0.0, started, error=str(exc), host=host)
    except LaunchError as exc:
        return Outcome(spec.name, spec.trace_dir, 2, 0.0, started, error=str(exc), host=host)
    out = Outcome(spec.name, spec.trace_dir, probe.exit_code, probe.wall_s, started, stopped=probe.stopped,
                  stopped_by=probe.stopped_by, stderr_tail=probe.stderr_tail(), host=host)
    try:
        s = probe.summary()
    except Exception as exc:  # a damaged trace must not hide the exit code
        out.error = f"the trace could not be analysed: {exc}"
        return out
    out.traced = bool(s.get("traced"))
    out.samples_per_s, out.wait_share = s.get("samples_per_s"), s.get("wait_share")
    out.ci95, out.note = s.get("ci95"), s.get("note")
    return out
