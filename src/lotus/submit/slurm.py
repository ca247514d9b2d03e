"""Slurm executor: every app is a Slurm job submitted through ``submitit``; inside the allocation the job
runs :func:`~lotus.submit.jobs.run_spec`, i.e. the same :func:`lotus.launch.launch` call as the local
executor, so traces look the same.

Resources come from the plan: ``cpus_per_task`` = the app's CPUs (its CPU set, or workers + 1 per rank),
``gpus_per_node`` = the number of devices in ``cuda_device`` (Slurm then sets CUDA_VISIBLE_DEVICES, and
the CPU affinity, inside the allocation: the plan's CPU numbers and device numbers are the submitting
host's and are not passed on). Partition and time limit are options.

Job state comes from the result file submitit writes and from ``squeue`` (clusters without accounting
have no ``sacct``); a job that left the queue without a result is reported failed with its log's tail.
Ctrl-C cancels every job submitted (``scancel``) and waits a few seconds for their results.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from lotus.errors import LotusError
from lotus.submit.jobs import LaunchSpec, Outcome, run_spec
from lotus.submit.local import Interrupted, _sleep, sigterm_as_interrupt

_log = logging.getLogger("lotus.submit")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
GONE_GRACE_S = 15.0  # a job out of the queue gets this long for its result file to appear (shared filesystems)
CANCEL_WAIT_S = 15.0


class SlurmUnavailable(LotusError):
    """submitit or the Slurm commands are missing (the CLI exits 2, nothing submitted)."""


def check_slurm() -> None:
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise SlurmUnavailable("--executor slurm needs submitit: pip install 'lotus-trace[slurm]' "
                               "(or pip install submitit)") from None
    for cmd in ("sbatch", "squeue", "scancel"):
        if shutil.which(cmd) is None:
            raise SlurmUnavailable(f"--executor slurm: {cmd} not found (no Slurm client on this host)")


def slurm_resources(spec: LaunchSpec) -> dict:
    """sbatch parameters (submitit names) of one app."""
    cpus = spec.n_cpus or ((spec.workers or 0) + 1)
    out = {"nodes": 1, "ntasks_per_node": 1, "cpus_per_task": max(1, int(cpus))}
    if spec.gpus:
        out["gpus_per_node"] = int(spec.gpus)
    return out


def job_state(job_id: str) -> str | None:
    """The job's state as squeue says it (None: not in the queue any more)."""
    try:
        r = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                           timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    state = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else None
    return state


class SlurmExecutor:
    """Submits specs as Slurm jobs with submitit and waits for their results."""

    name = "slurm"

    def __init__(self, folder: str | os.PathLike, *, partition: str | None = None, time_min: int = 60,
                 poll_s: float = 1.0, additional: dict | None = None, on_start=None, on_end=None):
        self.folder = Path(folder)
        self.on_start, self.on_end = on_start, on_end
        self.partition, self.time_min, self.poll_s = partition, int(time_min), float(poll_s)
        self.additional = dict(additional or {})

    def _submit(self, spec: LaunchSpec):
        import submitit

        ex = submitit.SlurmExecutor(folder=str(self.folder / "%j"))
        params = {"job_name": f"lotus-{spec.name}", "time": self.time_min, **slurm_resources(spec)}
        if self.partition:
            params["partition"] = self.partition
        if self.additional:
            params["additional_parameters"] = self.additional
        ex.update_parameters(**params)
        job = ex.submit(run_spec, spec.for_slurm())
        _log.info("%s: Slurm job %s (%s)", spec.name, job.job_id, ", ".join(f"{k}={v}" for k, v in params.items()))
        return job

    def _finished(self, job, gone: dict) -> bool:
        if Path(job.paths.result_pickle).exists():
            return True
        state = job_state(job.job_id)
        base = (state or "").split()[0] if state else None
        if state is None or base in FINISHED:
            gone.setdefault(job.job_id, time.monotonic())
            return time.monotonic() - gone[job.job_id] > GONE_GRACE_S
        return False

    def _outcome(self, job, spec: LaunchSpec) -> Outcome:
        if Path(job.paths.result_pickle).exists():
            try:
                out = job.result()
                out.job_id = str(job.job_id)
                return out
            except Exception as exc:  # the function raised inside the job
                msg = str(exc).strip().splitlines()
                return Outcome(spec.name, spec.trace_dir, 1, None, error=f"Slurm job {job.job_id}: "
                               f"{msg[-1] if msg else type(exc).__name__}", stderr_tail=_tail(job), job_id=job.job_id)
        state = job_state(job.job_id) or "not in the queue"
        return Outcome(spec.name, spec.trace_dir, 1, None, error=f"Slurm job {job.job_id} ended without a result "
                       f"({state})", stderr_tail=_tail(job), job_id=str(job.job_id))

    def run(self, specs: Sequence[LaunchSpec], *, concurrent: bool,
            delays_s: Sequence[float] | None = None) -> list[Outcome]:
        """As :meth:`lotus.submit.local.LocalExecutor.run`, with Slurm jobs."""
        check_slurm()
        specs = list(specs)
        delays = list(delays_s or [0.0] * len(specs))
        jobs: dict[int, object] = {}
        outcomes: list[Outcome | None] = [None] * len(specs)
        gone: dict = {}

        def wait(indices) -> None:
            todo = list(indices)
            while todo:
                for i in list(todo):
                    if self._finished(jobs[i], gone):
                        outcomes[i] = self._outcome(jobs[i], specs[i])
                        todo.remove(i)
                        if self.on_end is not None:
                            self.on_end(specs[i], outcomes[i])
                if todo:
                    time.sleep(self.poll_s)

        try:
            with sigterm_as_interrupt():
                for i, spec in enumerate(specs):
                    _sleep(delays[i])
                    if self.on_start is not None:
                        self.on_start(spec)
                    jobs[i] = self._submit(spec)
                    if not concurrent:
                        wait([i])
                wait([i for i in jobs if outcomes[i] is None])
        except KeyboardInterrupt:
            self._cancel(specs, jobs, outcomes)
            raise Interrupted(outcomes) from None
        return [o if o is not None else Outcome(s.name, s.trace_dir, None, None, error="not submitted")
                for s, o in zip(specs, outcomes, strict=True)]

    def _cancel(self, specs, jobs: dict, outcomes: list) -> None:
        live = [i for i in jobs if outcomes[i] is None]
        _log.warning("interrupted: cancelling %d Slurm job(s)", len(live))
        for i in live:
            try:
                jobs[i].cancel(check=False)
            except Exception as exc:
                _log.warning("scancel %s: %s", jobs[i].job_id, exc)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while live and time.monotonic() < deadline:
            for i in list(live):
                if Path(jobs[i].paths.result_pickle).exists() or job_state(jobs[i].job_id) is None:
                    live.remove(i)
            time.sleep(0.5)
        for i, job in jobs.items():
            if outcomes[i] is None:
                outcomes[i] = self._outcome(job, specs[i]) if Path(job.paths.result_pickle).exists() \
                    else Outcome(specs[i].name, specs[i].trace_dir, 130, None, error=f"Slurm job {job.job_id} "
                                 "cancelled", job_id=str(job.job_id))


def _tail(job, n_bytes: int = 4000) -> str:
    for path in (job.paths.stderr, job.paths.stdout):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        if data.strip():
            return data[-n_bytes:].decode(errors="replace")
    return ""
