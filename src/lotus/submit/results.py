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
    ci95: list[float] | None = None  # 95% interval of samples_per_s (the one measure)
    stopped_by: str | None = None  # why the run ended (precision, steps, time; None: the job ended)
    note: str | None = None  # the rate's note (an interval wider than the target, a short window...)

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
            stderr_tail=o.stderr_tail, error=o.error, job_id=o.job_id, host=o.host, ci95=o.ci95,
            stopped_by=o.stopped_by, note=o.note))
    return results, configs


def write_report(configs, out_dir: Path, *, figures: bool = True) -> tuple[Path, Path] | None:
    """One ``lotus report`` (HTML + report.json) over the apps' traces; None when no app was traced."""
    from lotus.analysis.report import write_report as _write

    if not configs:
        return None
    return _write(configs, out_dir / "report.html", figures=figures, data_dir=str(out_dir))


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _ci(ci) -> str:
    return "-" if not ci else f"{ci[0]:,.1f}-{ci[1]:,.1f}"


def rate_text(v, ci) -> str:
    """'1,234.5 (95% CI 1,200.0-1,270.1)', '1,234.5 (no interval)' or '-': a rate as the submit lines say it."""
    if v is None:
        return "-"
    return f"{v:,.1f}" + (f" (95% CI {_ci(ci)})" if ci else " (no interval)")


def _columns(head: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                 strict=True))).rstrip()

    return [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]


def table_lines(results: list[AppResult]) -> list[str]:
    """The per-app table as text lines (samples/s with its 95% interval and why the run ended), then the
    rates' notes and the stderr tail of each app that failed."""
    from lotus.analysis.steady import ended_by

    head = ["app", "status", "exit", "wall s", "samples/s", "95% CI", "ended by", "wait", "GPU idle (data)", "CPUs",
            "workers", "trace"]
    rows = [[r.name, r.status, _num(r.exit_code, "d"), _num(r.wall_s, ".1f"), _num(r.samples_per_s, ",.1f"),
             _ci(r.ci95), ended_by(r.stopped_by, r.exit_code) if r.exit_code is not None else "-",
             _num(r.wait_share, ".1%"), _num(r.gpu_idle_share, ".1%"), r.cpus or "-", _num(r.workers, "d"),
             r.trace_dir] for r in results]
    out = _columns(head, rows, {2, 3, 4, 5, 7, 8, 10})
    out += [f"note: {r.name}: {r.note}" for r in results if r.note and r.samples_per_s is not None]
    for r in results:
        if r.status == "failed" or r.error:
            tail = (r.stderr_tail or "").strip().splitlines()[-8:]
            out.append("")
            out.append(f"{r.name}: exit code {r.exit_code}" + (f" ({r.error})" if r.error else "")
                       + (", stderr ends with:" if tail else ""))
            out += [f"  | {t}" for t in tail]
    return out


def probe_lines(probes: list[dict]) -> list[str]:
    """The workers=auto profiling probes (``SubmitResult.probes``): samples/s with its 95% interval, why each
    ended, its note; a failed probe's stderr tail."""
    from lotus.analysis.steady import ended_by

    if not probes:
        return []
    rows = [[p["name"], _num(p.get("exit_code"), "d"), _num(p.get("wall_s"), ".1f"), str(p.get("cpus") or "-"),
             _num(p.get("workers"), "d"), _num(p.get("samples_per_s"), ",.1f"), _ci(p.get("ci95")),
             ended_by(p.get("stopped_by"), p.get("exit_code"))] for p in probes]
    out = ["profiling probes:", *_columns(["probe", "exit", "wall s", "CPUs", "workers", "samples/s", "95% CI",
                                           "ended by"], rows, {1, 2, 3, 4, 5, 6})]
    out += [f"note: {p['name']}: {p['note']}" for p in probes if p.get("note")]
    for p in probes:
        tail = (p.get("stderr_tail") or "").strip().splitlines()[-8:]
        if p.get("exit_code") and tail:
            out += [f"{p['name']}: exit code {p['exit_code']}, stderr ends with:", *(f"  | {t}" for t in tail)]
    return [*out, ""]


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
