"""``lotus run [OPTIONS] -- COMMAND...``: run any training command traced by lotus, unchanged."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from lotus.commands._params import budget_option, cpus_option, rate_text, sink_options


def _settings(values) -> dict:
    from lotus.dataloader.overrides import check

    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        try:
            out[key.strip()] = check(key.strip(), value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--set") from None
    return out


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--trace-dir", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the trace goes (default: lotus-runs/<script>-<time>/).")
@click.option("--workers", type=click.IntRange(0), default=None,
              help="Override num_workers of every DataLoader of the job.")
@click.option("--steps", type=click.IntRange(1), default=None,
              help="Probe: end the job cleanly (exit 0) after N batches of a loader were consumed.")
@click.option("--precision", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Probe: end earlier, once the steady samples/s is known to +-this (95%; 0.03 = 3%). "
                   "Needs --steps (the cap).")
@click.option("--max-seconds", "max_seconds", type=click.FloatRange(0, min_open=True), default=None,
              help="Probe: end after this many seconds of batches (past the ramp and a minimum window).")
@click.option("--below", type=click.FloatRange(0, min_open=True), default=None, metavar="SAMPLES_PER_S",
              help="Probe: end earlier, once the steady samples/s is shown below this (its whole 95% interval "
                   "under it; what lotus tune does with the best rate so far). Needs --steps.")
@click.option("--set", "settings", multiple=True, callback=lambda c, p, v: _settings(v), metavar="KEY=VALUE",
              help="Force a DataLoader setting on every loader: prefetch_factor, pin_memory, persistent_workers, "
                   "in_order, num_workers (repeatable).")
@click.option("--cpus", callback=cpus_option, default=None, metavar="LIST",
              help="CPU affinity of the job and all its processes, e.g. 0-3,8 (no root needed).")
@click.option("--itt", is_flag=True, help="Also emit ITT tasks for Intel VTune.")
@click.option("--telemetry", is_flag=True, help="Also sample NVML GPU utilisation, clocks and power.")
@click.option("--detail-budget", "detail_budget", callback=budget_option, default=None, metavar="PCT",
              help="CPU budget of the per-sample/per-op records, percent of the pipeline's CPU (default 0.5).")
@click.option("--full-detail", is_flag=True, help="Per-sample/per-op records for every batch (costs more).")
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="--no-trace: lotus's DataLoader is swapped in untraced (drop-in checks, --workers only).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the job after this long (exit code 124).")
@click.option("--verdict/--no-verdict", default=True, show_default=True,
              help="Print the verdict (as `lotus analyze verdict`) to stderr at the end.")
@click.option("--repeat", "repeat", type=click.IntRange(1), default=1, show_default=True, metavar="N",
              help="Run the command N times, one after the other, each a process of its own traced into "
                   "TRACE_DIR/r1..rN; then their mean, spread and whether each run's interval holds the others "
                   "(as `lotus analyze throughput --repeats`).")
@sink_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(trace_dir, workers, steps, precision, max_seconds, below, settings, cpus, itt, telemetry, detail_budget,
        full_detail, trace, timeout_s, verdict, repeat, tensorboard, prometheus, wandb, sink_period, command) -> None:
    """Run COMMAND (a script, `python -m ...`, a console script, torchrun) with lotus's DataLoader.

    Every torch.utils.data.DataLoader the command creates, in every process and torchrun rank, is
    lotus's, so scripts, Lightning, Accelerate and HF Trainer loaders are traced without edits. The
    command's exit code is lotus's exit code.

    \b
    lotus run -- python train.py --epochs 1
    lotus run --workers 8 --steps 200 -- torchrun --nproc-per-node 2 train.py
    lotus run --tensorboard runs/ --prometheus 9108 -- python train.py   # live metrics (docs/live-sinks.md)
    lotus run --repeat 5 -o runs/base -- python train.py   # 5 runs: is one run's interval honest here?
    """
    from lotus.launch.options import LaunchOptions
    from lotus.launch.runner import CommandNotFound, LaunchError, launch

    if not command:
        raise click.UsageError("no command given: lotus run [OPTIONS] -- COMMAND [ARGS]...")
    if steps is not None and not trace:
        raise click.UsageError("--steps needs tracing (drop --no-trace)")
    if repeat > 1 and not trace:
        raise click.UsageError("--repeat compares the runs' traced rates: drop --no-trace")
    if (precision or max_seconds or below) and steps is None:
        raise click.UsageError("--precision, --max-seconds and --below end a probe early: give its cap with --steps")
    sinks = None
    if tensorboard or prometheus or wandb:
        if not trace:
            raise click.UsageError("--tensorboard, --prometheus and --wandb publish from the trace: drop --no-trace")
        from lotus.live.sinks import SinkOptions

        sinks = SinkOptions(tensorboard=tensorboard, prometheus=prometheus, wandb=wandb, period_s=sink_period)
    options = LaunchOptions(trace_dir=trace_dir, trace=trace, workers=workers, steps=steps, precision=precision,
                            max_seconds=max_seconds, below=below, cpus=cpus, itt=itt,
                            telemetry=telemetry, timeout_s=timeout_s, loader_args=settings,
                            detail_budget_pct=detail_budget, full_detail=full_detail, sinks=sinks)
    try:
        if repeat > 1:
            _repeats(list(command), options, repeat, verdict, precision)
        probe = launch(list(command), options)
    except CommandNotFound as exc:
        click.echo(f"lotus: {exc}", err=True)
        raise click.exceptions.Exit(127) from None
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    _report(probe, verdict, precision)
    raise click.exceptions.Exit(probe.exit_code)


def _repeats(command: list[str], options, n: int, verdict: bool, precision: float | None) -> None:
    """``--repeat N``: the runs one after the other, each reported; then what they say together. Exits with the
    first failed run's exit code (0 when every run succeeded)."""
    from lotus.commands.analyze_throughput import repeats_lines
    from lotus.launch.repeats import launch_repeats, read_repeats

    def progress(k, probe):
        click.echo(f"lotus run: repeat {k} of {n}", err=True)
        _report(probe, verdict and k == n, precision)

    root, probes = launch_repeats(command, options, n, progress=progress)
    r = read_repeats(probes)
    if r is None:
        click.echo(f"lotus run: {len(probes)} runs in {root}: fewer than two with a rate, nothing to compare", err=True)
    else:
        for line in repeats_lines(r):
            click.echo(f"lotus run: {line}", err=True)
        click.echo(f"lotus run: the runs are in {root} (lotus analyze throughput -d {root} --repeats)", err=True)
    raise click.exceptions.Exit(next((p.exit_code for p in probes if p.exit_code), 0))


def _ended(stopped_by: str | None, steps, rel_halfwidth: float | None, precision: float | None) -> str:
    """'; ended: --steps, before its within-run interval reached +-3% (it is +-7.9%)' and the like ('' when no
    probe). ``rel_halfwidth``: the run's own interval, the one the stop rule judges (the rate's shown interval adds
    the run-to-run spread: lotus.analysis.runspread)."""
    from lotus.analysis.steady import PRECISION

    if stopped_by == "precision":
        return "; ended: within-run interval within --precision"
    if stopped_by is None:
        return "; ended: the job ended before --steps" if steps is not None else ""
    if stopped_by == "below":
        return "; ended: interval wholly under --below"
    text = "; ended: " + {"time": "--max-seconds", "steps": "--steps"}.get(stopped_by, stopped_by)
    target = precision or PRECISION
    if rel_halfwidth is not None and rel_halfwidth > target:
        text += f", before its within-run interval reached +-{target * 100:g}% (it is +-{rel_halfwidth:.1%})"
    elif rel_halfwidth is None:
        text += ", before the rate had an interval"
    return text


def _report(probe, verdict: bool, precision: float | None = None) -> None:
    err = sys.stderr
    how = {"grace": " (stopped: it did not exit after --steps)", "timeout": " (stopped: --timeout)",
           "interrupt": " (interrupted)"}.get(probe.stopped or "", "")
    click.echo(f"lotus run: exit code {probe.exit_code} after {probe.wall_s:.1f} s{how}", err=True)
    if probe.trace_dir is None:
        return
    try:
        s = probe.summary()
    except Exception as exc:  # a damaged trace must not hide the job's exit code
        click.echo(f"lotus run: the trace in {probe.trace_dir} could not be analysed ({exc})", err=True)
        return
    if not s.get("traced"):
        note = "the command created no DataLoader (nothing traced)"
        if probe.workers is not None:
            note += "; --workers had no effect"
        click.echo(f"lotus run: note: {note}", err=True)
        return
    rate = s.get("samples_per_s")
    own = s.get("within_rel_halfwidth")
    ended = _ended(probe.stopped_by, probe.steps, own if own is not None else s.get("rel_halfwidth"), precision)
    click.echo(f"lotus run: trace in {probe.trace_dir}: {s['batches']} batches"
               + (f", {rate_text(rate, s.get('ci95'))} in the steady state" if rate else "") + ended, err=True)
    if rate and s.get("note"):
        click.echo(f"lotus run: note: {s['note']}", err=True)
    if verdict:
        from lotus.commands.analyze import _print_verdict

        with contextlib.redirect_stdout(err):
            _print_verdict(s["name"], s["verdict"], per_rank=False)
