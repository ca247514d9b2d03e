"""The end of a submit: one :class:`AppResult` per app (samples/s, wait share, GPU idle from data, wall
time, exit code, stderr tail), the text table, and one HTML report over all apps."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from lotus.launch.options import format_cpus
from lotus.submit.jobs import Outcome
from lotus.submit.plan import AppPlan

_log = logging.getLogger("lotus.submit")


@dataclass
class AppResult:
    row: int
    name: str
    status: str  # "ok", "failed", "interrupted", "not started"
    exit_code: int | None
    wall_s: float | None
    samples_per_s: float | None
    wait_share: float | None
    gpu_idle_share: float | None  # GPU time idle waiting for data (CUDA events), None when not measured
    cpus: str | None
    workers: int | None
    trace_dir: str
    start_s: float | None  # after the submit began
    stderr_tail: str = ""
    error: str | None = None
    job_id: str | None = None
    host: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def gpu_idle_share(config) -> float | None:
    """Share of GPU time idle waiting for data (mean over ranks with CUDA events), from a loaded config."""
    from lotus.analysis.gpu import gpu_report

    try:
        rep = gpu_report(config.events, config.batches)
    except Exception as exc:  # no consumed batches, no GPU columns...
        _log.debug("%s: no GPU figures (%s)", config.name, exc)
        return None
    vals = [r.get("data_idle_share_of_gpu_time") for r in rep.get("ranks", {}).values() if r.get("cuda_events")]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def _status(o: Outcome | None, interrupted: bool) -> str:
    if o is None or o.exit_code is None:
        return "not started"
    if o.stopped == "interrupt" or (interrupted and o.exit_code in (130, 143, 137)):
        return "interrupted"
    return "ok" if o.exit_code == 0 else "failed"


def _cpus_text(p: AppPlan, slurm: bool) -> str | None:
    if slurm:
        n = p.spec().n_cpus
        return None if n is None else f"{n} (Slurm)"
    return format_cpus(p.cpus) if p.cpus else None


def collect(plans: list[AppPlan], outcomes: list[Outcome | None], t0_wall_s: float,
            interrupted: bool = False, slurm: bool = False) -> tuple[list[AppResult], list]:
    """AppResults, and the analysis configs of the traced apps (named after the apps) for the report.
    ``slurm``: CPUs are a count (the allocation's), not the plan's CPU numbers."""
    from lotus.analysis.runs import load_config
    from lotus.errors import InputError

    results, configs = [], []
    for p, o in zip(plans, outcomes, strict=True):
        o = o or Outcome(p.name, str(p.trace_dir), None, None)
        gpu = None
        if o.traced:
            try:
                cfg = load_config(o.trace_dir)
                cfg.name = p.name
                configs.append(cfg)
                gpu = gpu_idle_share(cfg)
            except (InputError, OSError) as exc:
                _log.warning("%s: trace not readable: %s", p.name, exc)
        results.append(AppResult(
            row=p.app.row, name=p.name, status=_status(o, interrupted), exit_code=o.exit_code, wall_s=o.wall_s,
            samples_per_s=o.samples_per_s, wait_share=o.wait_share, gpu_idle_share=gpu,
            cpus=_cpus_text(p, slurm), workers=p.workers, trace_dir=str(p.trace_dir),
            start_s=None if o.started_wall_s is None else max(0.0, o.started_wall_s - t0_wall_s),
            stderr_tail=o.stderr_tail, error=o.error, job_id=o.job_id, host=o.host))
    return results, configs


def write_report(configs, out_dir: Path, *, figures: bool = True) -> tuple[Path, Path] | None:
    """One ``lotus report`` (HTML + report.json) over the apps' traces; None when no app was traced."""
    from lotus.analysis.report import write_report as _write

    if not configs:
        return None
    return _write(configs, out_dir / "report.html", figures=figures, data_dir=str(out_dir))


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table_lines(results: list[AppResult]) -> list[str]:
    """The per-app table as text lines, then the stderr tail of each app that failed."""
    head = ["app", "status", "exit", "wall s", "samples/s", "wait", "GPU idle (data)", "CPUs", "workers", "trace"]
    rows = [[r.name, r.status, _num(r.exit_code, "d"), _num(r.wall_s, ".1f"), _num(r.samples_per_s, ",.1f"),
             _num(r.wait_share, ".1%"), _num(r.gpu_idle_share, ".1%"), r.cpus or "-", _num(r.workers, "d"),
             r.trace_dir] for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    right = {2, 3, 4, 5, 6, 8}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                 strict=True))).rstrip()

    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    for r in results:
        if r.status == "failed" or r.error:
            tail = (r.stderr_tail or "").strip().splitlines()[-8:]
            out.append("")
            out.append(f"{r.name}: exit code {r.exit_code}" + (f" ({r.error})" if r.error else "")
                       + (", stderr ends with:" if tail else ""))
            out += [f"  | {t}" for t in tail]
    return out


def plan_lines(plan, executor: str = "local", slurm: dict | None = None) -> list[str]:
    """The plan as text: per app its start, CPUs, workers, environment, trace directory and command."""
    import shlex

    from lotus.submit.slurm import slurm_resources

    out = [f"plan: {len(plan.apps)} app(s), {plan.mode}, executor {executor}, CPUs {format_cpus(plan.pool)}, "
           f"output {plan.out_dir}"]
    for i, p in enumerate(plan.apps):
        if plan.concurrent:
            when = f"t+{p.start_s:g} s"
        else:
            when = f"{p.delay_s:g} s after the previous app ends" if i else f"t+{p.delay_s:g} s"
        cpus = f"CPUs {format_cpus(p.cpus)} ({p.cpus_source})" if p.cpus else "CPUs not pinned"
        workers = "workers: the job's own" if p.workers is None else f"{p.workers} worker(s)" + \
            (" per rank" if p.ranks > 1 else "")
        out.append(f"[{p.app.row}] {p.name}: start {when}; {cpus}; {workers}"
                   + (f"; {p.ranks} ranks" if p.ranks > 1 else "") + (f"; {p.steps} steps" if p.steps else ""))
        env = " ".join(f"{k}={v}" for k, v in sorted(p.env.items()))
        if executor == "slurm":
            res = {**slurm_resources(p.spec()), **(slurm or {})}
            out.append("    slurm: " + " ".join(f"{k}={v}" for k, v in res.items() if v is not None))
            env = " ".join(f"{k}={v}" for k, v in sorted(p.spec().for_slurm().env.items()))
        if env:
            out.append(f"    env: {env}")
        out.append(f"    trace: {p.trace_dir}")
        out.append(f"    command: {shlex.join(p.command)}")
    out += [f"note: {n}" for n in plan.notes]
    return out
