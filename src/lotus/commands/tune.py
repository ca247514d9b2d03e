"""``lotus tune [OPTIONS] -- COMMAND...``: the DataLoader settings that maximise samples/s (model + probes)."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands._params import control_option, cpus_option, failed_probe_lines, probe_options, rate_text

_KNOBS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")


def _only(ctx, param, value):
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in _KNOBS]
    if bad or not names:
        raise click.BadParameter(f"{', '.join(bad) or value!r}: choose among {', '.join(_KNOBS)}")
    return tuple(names)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@probe_options()
@click.option("--cpus", callback=cpus_option, default=None, metavar="LIST",
              help="CPUs the job may use, e.g. 0-7 (affinity of every probe; default: all of this process's).")
@click.option("--budget-minutes", type=click.FloatRange(0, min_open=True), default=10.0, show_default=True,
              help="No probe starts that would end after this (the baseline always runs).")
@click.option("--max-probes", type=click.IntRange(1), default=12, show_default=True, help="The baseline included.")
@click.option("--max-workers", type=click.IntRange(0), default=None,
              help="Largest num_workers tried (default 2x the CPUs per rank).")
@click.option("--tolerance", type=click.FloatRange(0, 1), default=0.05, show_default=True,
              help="Prediction and measurement agree within this share.")
@click.option("--min-gain", type=click.FloatRange(0, 1), default=0.02, show_default=True,
              help="A setting other than the job's own must be measured this much faster.")
@click.option("--only", callback=_only, default=None, metavar="LIST",
              help=f"Tune only these settings ({','.join(_KNOBS)}).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop a probe after this long (default: 5x the baseline's time, at least 120 s).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Every probe's trace directory and tune.json (default lotus-runs/tune-<script>-<time>/).")
@click.option("--one-process/--process-per-probe", "one_process", default=True, show_default=True,
              help="Run the probes one after the other in the job's one process (start-up paid once; an "
                   "epoch-crossing probe, or a job that ended, gets a process of its own).")
@control_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune(steps, precision, max_seconds, cpus, budget_minutes, max_probes, max_workers, tolerance, min_gain, only,
         timeout_s, one_process, out, control, as_json, command) -> None:
    """Find the DataLoader settings of COMMAND that maximise samples/s.

    One probe of the job as it is, then the throughput model proposes num_workers and short probes
    (`lotus run --workers N --steps S`) verify around its optimum; then prefetch_factor, pin_memory and
    persistent_workers. Prints the recommended DataLoader arguments, the measured gain over the job's
    own settings, and every probe.

    \b
    lotus tune -- python train.py --epochs 1
    lotus tune --cpus 0-15 --budget-minutes 5 --json -- python train.py
    """
    from lotus.launch.runner import CommandNotFound, LaunchError
    from lotus.tune.tuner import tune as run_tune
    from lotus.tune.types import TuneError

    if not command:
        raise click.UsageError("no command given: lotus tune [OPTIONS] -- COMMAND [ARGS]...")

    def progress(line: str) -> None:
        if not as_json:
            click.echo(f"lotus tune: {line}", err=True)

    try:
        result = run_tune(list(command), out=out, steps=steps, precision=precision or None, max_seconds=max_seconds,
                          cpus=cpus, budget_minutes=budget_minutes,
                          max_probes=max_probes, max_workers=max_workers, tolerance=tolerance, min_gain=min_gain,
                          only=only, timeout_s=timeout_s, progress=progress, one_process=one_process,
                          control=control)
    except CommandNotFound as exc:
        click.echo(f"lotus: {exc}", err=True)
        raise click.exceptions.Exit(127) from None
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    except TuneError as exc:
        tail = exc.stderr_tail.strip()
        if tail:
            click.echo("\n".join("  | " + line for line in tail.splitlines()[-15:]), err=True)
        where = f" (trace: {exc.trace_dir})" if exc.trace_dir else ""
        click.echo(f"lotus: error: {exc}{where}", err=True)
        raise click.exceptions.Exit(1) from None
    from lotus.analysis.jsonutil import dumps

    if as_json:
        click.echo(dumps(result.to_dict()))
        return
    _print(result)


def _num(v, fmt="{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ci(ci) -> str:
    return f"{ci[0]:,.1f}-{ci[1]:,.1f}" if ci else "-"


def _print(r) -> None:
    from lotus.analysis.steady import ended_by

    failed = [p for p in r.probes if p.failed]
    click.echo(f"lotus tune: {len(r.probes)} probes in {r.seconds:.0f} s ({r.cpus} CPUs); traces in {r.out}")
    click.echo("  recommended:")
    click.echo(f"    {r.best.snippet()}")
    own = r.baseline
    gain = f" ({r.gain:.2f}x)" if r.gain else ""
    click.echo(f"  measured with it: {rate_text(r.samples_per_s, r.ci95)}{gain}")
    click.echo(f"  with the job's own settings (num_workers={own.num_workers}, prefetch_factor={own.prefetch_factor}, "
               f"pin_memory={own.pin_memory}, persistent_workers={own.persistent_workers}): "
               f"{rate_text(r.baseline_samples_per_s, r.baseline_ci95)}")
    if r.settled is False:
        click.echo(f"  NOT SETTLED: {', '.join(map(str, r.unsettled_workers))} worker(s) may be more than 5% faster "
                   "(see the note below)")
    if r.predicted_samples_per_s:
        click.echo(f"  the model predicts {_num(r.predicted_samples_per_s)} samples/s at num_workers="
                   f"{r.best.num_workers}; search: {r.stopped}")
    click.echo(f"  {'probe':<24} {'workers':>7} {'pf':>3} {'pin':>5} {'persist':>7} {'samples/s':>10} "
               f"{'95% CI':>19} {'predicted':>10} {'error':>6} {'loo':>6} {'wait':>5} {'wall s':>7} ended by")
    for p in r.probes:
        s = p.settings
        rate = _num(p.samples_per_s) if not p.failed else f"FAILED {p.exit_code}"
        click.echo(f"  {p.name:<24} {_num(s.get('num_workers'), '{}'):>7} {_num(s.get('prefetch_factor'), '{}'):>3} "
                   f"{s.get('pin_memory')!s:>5} {s.get('persistent_workers')!s:>7} {rate:>10} "
                   f"{_ci(p.ci95):>19} {_num(p.predicted_samples_per_s):>10} {_num(p.model_error, '{:+.0%}'):>6} "
                   f"{_num(p.loo_error, '{:+.0%}'):>6}{'!' if p.disagrees else ' '}{_num(p.wait_share, '{:.0%}'):>5} "
                   f"{p.wall_s:>7.1f} {'failed' if p.failed else ended_by(p.stopped_by, p.exit_code)}")
    if any(p.model_error is not None or p.loo_error is not None for p in r.probes):
        mc = r.model_check or {}
        pi = mc.get("prediction_interval")
        click.echo("  error: the model's prediction made before the probe against its measurement; loo: the model of "
                   "every other probe; !: off by more than the probe's interval + 10%"
                   + (f"; the model's predictions hold to +-{pi:.0%}" if pi is not None and mc.get("holds") else "")
                   + ("; the model does NOT hold for this job: the measured probes decide" if mc.get("holds") is False
                      else ""))
    for p in r.probes:
        if p.note and not p.failed:
            click.echo(f"  {p.name}: {p.note}")
    for p in failed:
        for line in failed_probe_lines(p.name, p.exit_code, p.stderr_tail):
            click.echo(line)
    for n in r.notes:
        click.echo(f"  note: {n}")
