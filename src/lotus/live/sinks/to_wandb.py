"""Weights & Biases: the scalars of :func:`lotus.live.sinks.values.scalars` on the job's own run, or a new one.

The job's run: ``$WANDB_RUN_ID`` when the job's environment sets it, else the newest run directory
(``run-*`` or ``offline-run-*`` under ``$WANDB_DIR/wandb`` or the job's working directory's ``wandb/``) whose
``.wandb`` log was written since the job started. Its project is ``$WANDB_PROJECT`` (a running run's log
holds nothing readable before W&B flushes its first 32 KiB block, so the project a script passes to
``wandb.init`` cannot be known from outside). The sink looks for the run until its first publish after
``wait_s`` (keeping the values until then), then opens:

* online, the job's run found and its project known: W&B's shared mode (several processes write one run;
  this one is not the primary, and its end does not finish the run);
* offline (``WANDB_MODE=offline``), the job's run found: an offline run with the job's run id under
  ``TRACE_DIR/wandb/`` (W&B cannot share a run offline; ``wandb sync`` uploads it);
* otherwise: a new run, project ``$WANDB_PROJECT`` or ``lotus``, named ``lotus-<trace dir>``, with the job's
  run id (when found) in its config.

Every publish logs ``lotus/step`` (the loop's batch count) with the scalars, and the ``lotus/*`` metrics are
defined against it, so they never touch the job's own step.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from lotus.live.sinks.values import RunValues, scalars

STEP = "lotus/step"
_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-([A-Za-z0-9]+)$")
MAX_PENDING = 10_000


@dataclass(frozen=True)
class JobRun:
    id: str
    project: str | None = None
    entity: str | None = None
    path: Path | None = None


def find_job_run(job_cwd: str | None, since_ns: int | None) -> JobRun | None:
    """The W&B run the job has open (see the module doc), or None."""
    env = os.environ
    if env.get("WANDB_RUN_ID"):
        return JobRun(env["WANDB_RUN_ID"], env.get("WANDB_PROJECT"), env.get("WANDB_ENTITY"))
    root = Path(env.get("WANDB_DIR") or job_cwd or os.getcwd()) / "wandb"
    best = None
    try:
        for d in root.iterdir():
            m = _RUN_DIR.match(d.name)
            log = d / f"run-{m.group(1)}.wandb" if m else None
            if log is None or not log.is_file():
                continue
            mtime = log.stat().st_mtime_ns
            if (since_ns is None or mtime >= since_ns) and (best is None or mtime > best[0]):
                best = (mtime, m.group(1), d)
    except OSError:
        return None
    if best is None:
        return None
    return JobRun(best[1], env.get("WANDB_PROJECT"), env.get("WANDB_ENTITY"), best[2])


def offline() -> bool:
    return os.environ.get("WANDB_MODE", "").strip().lower() in ("offline", "dryrun")


class WandbSink:
    name = "wandb"

    def __init__(self, run_dir: str | os.PathLike, *, since_ns: int | None = None, job_cwd: str | None = None,
                 wait_s: float = 10.0):
        import wandb  # noqa: F401 - a missing package is said when the sidecar starts

        self.run_dir = Path(run_dir)
        self.since_ns = since_ns
        self.job_cwd = job_cwd
        self.deadline = time.monotonic() + wait_s
        self.run = None
        self.attached: JobRun | None = None
        self.pending: list[RunValues] = []

    def publish(self, values: RunValues) -> None:
        if values.main is None:
            return
        if self.run is None:
            target = find_job_run(self.job_cwd, self.since_ns)
            if target is None and not values.final and time.monotonic() < self.deadline:
                if len(self.pending) < MAX_PENDING:
                    self.pending.append(values)
                return
            self._open(target)
            for v in self.pending:
                self._log(v)
            self.pending = []
        self._log(values)

    def _log(self, values: RunValues) -> None:
        data = scalars(values)
        if data:
            self.run.log({**data, STEP: values.step})

    def _open(self, target: JobRun | None) -> None:
        import wandb

        settings = {"console": "off", "x_disable_stats": True, "x_disable_meta": True, "disable_git": True,
                    "save_code": False, "silent": True, "x_label": "lotus"}
        kwargs: dict = {"dir": str(self.run_dir)}
        if target is not None and (offline() or target.project):
            kwargs.update(id=target.id, project=target.project, entity=target.entity)
            if offline():
                kwargs["resume"] = "allow"
            else:
                settings.update(mode="shared", x_primary=False, x_update_finish_state=False)
        else:
            config = {"lotus_trace_dir": str(self.run_dir.resolve()), "job_run_id": target.id if target else None}
            kwargs.update(project=os.environ.get("WANDB_PROJECT") or "lotus", name=f"lotus-{self.run_dir.name}",
                          job_type="lotus", config=config)
            target = None
        self.run = wandb.init(settings=wandb.Settings(**settings), **kwargs)
        self.attached = target
        self.run.define_metric(STEP)
        self.run.define_metric("lotus/*", step_metric=STEP)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
