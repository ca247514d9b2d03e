"""What `lotus run` can change about a job, and how it travels to the job's processes (environment)."""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from lotus import _env

RUN_FILE = _env.RUN_FILE
STEPS_MARKER = _env.STEPS_MARKER


@dataclass
class LaunchOptions:
    """Options of one launch. ``None`` leaves the job's own setting."""

    trace_dir: str | os.PathLike | None = None  # default: lotus-runs/<script>-<time>/
    trace: bool = True  # False: lotus's DataLoader is patched in, untraced (drop-in checks)
    workers: int | None = None
    steps: int | None = None  # end after this many batches (a probe's cap)
    precision: float | None = None  # end earlier, once the steady rate's 95% interval is within +-precision
    max_seconds: float | None = None  # end a probe after this many seconds of hand-offs (past its minimum)
    below: float | None = None  # end a probe once its rate's 95% interval lies wholly under this (samples/s)
    cpus: list[int] | None = None
    itt: bool = False
    telemetry: bool = False
    detail_budget_pct: float | None = None  # per-sample detail budget, percent (None: the loaders' default)
    full_detail: bool = False  # per-sample/per-op records for every batch
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the job
    cwd: str | os.PathLike | None = None
    capture: bool = False  # write the job's stdout/stderr to files in the trace dir instead of passing them on
    grace_s: float = 30.0  # after --steps is reached: how long the job may take to exit before it is stopped
    timeout_s: float | None = None  # stop the job after this many seconds (exit code 124)
    loader_args: dict = field(default_factory=dict)  # DataLoader settings to force (lotus.dataloader.overrides)
    replay: int | None = None  # prepare this many batches, then replay them (ingestion-limit probe)
    list_dataset_files: bool = False  # loaders write their dataset's file list into the trace dir
    on_start: object = None  # callable(pid) run right after the job started (pid = its process group)
    sinks: object = None  # lotus.live.sinks.SinkOptions: live metrics from a sidecar that follows the trace
    series: str | os.PathLike | None = None  # probes in one process: the control directory (lotus.launch.series)


def parse_cpus(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]. ValueError with a readable message on bad input."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise ValueError(f"{part!r} is not a CPU number or range (e.g. 0-3,8)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"{part!r}: range end below its start")
        cpus.update(range(lo, hi + 1))
    if not cpus:
        raise ValueError("no CPUs given")
    return sorted(cpus)


def format_cpus(cpus) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    out, run = [], []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def script_name(command: list[str]) -> str:
    """A short name for a command: the script or module it runs (train.py -> train; -m a.b -> b)."""
    args = list(command)
    launcher = Path(args[0]).name if args else ""
    if launcher.startswith(("torchrun", "python")) or launcher in ("uv", "accelerate", "deepspeed"):
        rest = args[1:]
        for i, a in enumerate(rest):
            if a == "-m" and i + 1 < len(rest):
                return _safe(rest[i + 1].rsplit(".", 1)[-1])
            if a.endswith(".py"):
                return _safe(Path(a).stem)
        for a in rest:
            if not a.startswith("-") and "=" not in a:
                return _safe(Path(a).stem)
    return _safe(Path(args[0]).stem) if args else "job"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "job"


def default_trace_dir(command: list[str], root: str | os.PathLike = "lotus-runs") -> Path:
    """lotus-runs/<script>-<YYYYmmdd-HHMMSS>/ (a suffix when that exists already)."""
    base = Path(root) / f"{script_name(command)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def boot_dir() -> str:
    """The directory holding lotus's sitecustomize (put first on the job's PYTHONPATH)."""
    return str(Path(__file__).resolve().parent / "_boot")


def job_env(options: LaunchOptions, trace_dir: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the job: ``base`` (default: this process's) plus lotus's settings."""
    env = dict(os.environ if base is None else base)
    env.update(options.env)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = boot_dir() + (os.pathsep + old if old else "")
    env[_env.LAUNCH] = "1"
    for name in (_env.TRACE_DIR, _env.WORKERS, _env.STEPS, _env.PRECISION, _env.PROBE_MAX_S, _env.ITT, _env.TELEMETRY,
                 _env.REPLAY, _env.DATASET_FILES, _env.LOADER_ARGS, _env.TENSORBOARD, _env.PROMETHEUS, _env.WANDB,
                 _env.SINK_PERIOD, _env.SIDECAR, _env.STOP_BELOW, _env.PROBE_SERIES):
        env.pop(name, None)  # the launcher's sidecar publishes: the job's loaders start none of their own
    if options.full_detail:
        env[_env.DETAIL] = "full"
    if options.detail_budget_pct is not None:
        env[_env.DETAIL_BUDGET] = repr(float(options.detail_budget_pct))
    if options.loader_args:
        import json

        env[_env.LOADER_ARGS] = json.dumps(options.loader_args)
    if options.trace and trace_dir is not None:
        env[_env.TRACE_DIR] = str(Path(trace_dir).resolve())
        if options.sinks is not None:
            env[_env.SIDECAR] = "1"
    if options.workers is not None:
        env[_env.WORKERS] = str(int(options.workers))
    if options.steps is not None:
        env[_env.STEPS] = str(int(options.steps))
        if options.precision:
            env[_env.PRECISION] = repr(float(options.precision))
        if options.max_seconds:
            env[_env.PROBE_MAX_S] = repr(float(options.max_seconds))
        if options.below:
            env[_env.STOP_BELOW] = repr(float(options.below))
    if options.series is not None:
        env[_env.PROBE_SERIES] = str(Path(options.series).resolve())
    if options.replay:
        env[_env.REPLAY] = str(int(options.replay))
    if options.list_dataset_files:
        env[_env.DATASET_FILES] = "1"
    if options.itt:
        env[_env.ITT] = "1"
    if options.telemetry:
        env[_env.TELEMETRY] = "1"
    if options.cpus:
        # math libraries size their thread pools from the machine, not the affinity mask
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, str(len(options.cpus)))
    return env


def describe(command: list[str]) -> str:
    return shlex.join(command)
