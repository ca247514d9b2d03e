"""When tracing is on, and the small picklable settings a worker process needs."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from lotus import _env

TRACE_DIR_ENV = _env.TRACE_DIR
ITT_ENV = _env.ITT
TELEMETRY_ENV = _env.TELEMETRY
STEPS_ENV = _env.STEPS
REPLAY_ENV = _env.REPLAY
DATASET_FILES_ENV = _env.DATASET_FILES
_TRUE = {"1", "true", "yes", "on"}


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def resolve_trace_dir(trace_dir) -> str | None:
    """The trace directory: the keyword wins, else $LOTUS_TRACE_DIR, else None (tracing off)."""
    if trace_dir is not None and trace_dir is not False:
        return os.fspath(trace_dir)
    env = os.environ.get(TRACE_DIR_ENV, "").strip()
    return env or None


def resolve_itt(itt) -> bool:
    return bool(itt) if itt is not None else env_flag(ITT_ENV)


def resolve_telemetry(flag) -> bool:
    return bool(flag) if flag is not None else env_flag(TELEMETRY_ENV)


def sinks_requested(live_sinks) -> bool:
    """Live metrics asked for: ``live_sinks=`` given, or $LOTUS_TENSORBOARD / $LOTUS_PROMETHEUS / $LOTUS_WANDB set
    (lotus.live.sinks reads them; this check imports nothing)."""
    if live_sinks is not None:
        return True
    return any(os.environ.get(name, "").strip() for name in (_env.TENSORBOARD, _env.PROMETHEUS, _env.WANDB))


def _env_int(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def steps_limit() -> int | None:
    """Consumed batches after which ``lotus run --steps`` ends the job (None: no limit)."""
    n = _env_int(STEPS_ENV)
    return n if n else None


def _env_float(name: str) -> float | None:
    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


def stop_rule(world_size: int, batch_size: int | None = None):
    """The adaptive probe end (``lotus run --precision``), or None. One rank only: ranks that stop at
    different steps would leave a collective waiting, so a job of several ranks ends at ``--steps``.
    ``--below`` (samples/s) is compared in batches/s, the rule's unit: ``batch_size`` converts it; a loader
    without one (a batch sampler of its own) ignores it (its probe ends by the other rules)."""
    precision, max_s = _env_float(_env.PRECISION), _env_float(_env.PROBE_MAX_S)
    below = _env_float(_env.STOP_BELOW)
    below = below / batch_size if below is not None and isinstance(batch_size, int) and batch_size > 0 else None
    if (precision is None and max_s is None and below is None) or world_size > 1:
        return None
    from lotus.dataloader.probe import StopRule

    return StopRule(precision=precision, max_s=max_s, below=below)


def replay_batches() -> int:
    """Batches to prepare and then replay (``lotus stalls`` ingestion probe); 0: off."""
    return _env_int(REPLAY_ENV) or 0


def distributed_rank() -> tuple[int, int]:
    """(rank, world_size): torch.distributed when initialised, else $RANK/$WORLD_SIZE, else (0, 1)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


_loader_ids = itertools.count()


def next_loader_id() -> int:
    return next(_loader_ids) % 32768


@dataclass(frozen=True)
class WorkerTraceConfig:
    """Everything a worker process needs to trace itself (pickled to spawn/forkserver workers)."""

    trace_dir: str
    itt: bool
    rank: int
    world_size: int
    loader: int
    epoch: int
    envelope: bool  # wrap batches for pin-memory timing
    num_workers: int
    main_pid: int = -1  # the process that owns the loader (readers tell loaders of several processes apart)
    detail_budget: float | None = None  # per-sample/per-op detail budget, fraction of the work (None: full)
