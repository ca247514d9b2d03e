"""``lotus submit APPS.csv``: run many apps from a CSV (torchloader's dispatcher), each traced by lotus."""

from __future__ import annotations

import time
from pathlib import Path

import click

from lotus.commands._params import cpus_option


def _bad_input(message: str) -> None:
    click.echo(f"lotus submit: error: {message}", err=True)
    raise click.exceptions.Exit(2)


def _progress():
    def on_start(spec) -> None:
        cpus = f", CPUs {len(spec.cpus)}" if spec.cpus else ""
        what = {"probe": "profiling probe of ", "trial": "trial of "}.get(spec.kind, "")
        click.echo(f"lotus submit: start {what}{spec.name}{cpus} -> {spec.trace_dir}", err=True)

    def on_end(spec, outcome) -> None:
        wall = "" if outcome.wall_s is None else f" after {outcome.wall_s:.1f} s"
        what = {"probe": "profiling probe of ", "trial": "trial of "}.get(spec.kind, "")
        rate = ""
        if outcome.samples_per_s is not None:
            from lotus.submit.results import rate_text

            text = rate_text(outcome.samples_per_s, outcome.ci95)
            value, _, ci = text.partition(" ")
            rate = f", {value} samples/s {ci}"
        click.echo(f"lotus submit: {what}{spec.name} ended: exit code {outcome.exit_code}{wall}{rate}", err=True)

    return on_start, on_end


@click.command()
@click.argument("apps_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(["sequential", "concurrent"]), default="sequential", show_default=True,
              help="One app after another, or side by side (submit_interval seconds between starts).")
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="Local processes, or Slurm jobs through submitit.")
@click.option("--dry-run", is_flag=True, help="Print the plan (commands, env, CPU sets, start times); start nothing.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="ImageFolder dataset of the example trainer (rows without a command).")
@click.option("--generate", type=click.IntRange(1), default=None, metavar="N",
              help="First generate N JPEGs into --data (lotus demo's dataset; kept when already there).")
@click.option("--trainer", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The example trainer script (default: examples/train_imagenet.py of the lotus checkout).")
@click.option("--steps", type=click.IntRange(1), default=None,
              help="End every app cleanly after N batches (a row's `steps` wins).")
@click.option("--probe-steps", type=click.IntRange(5), default=600, show_default=True,
              help="Most batches of each workers=auto profiling probe (its cap).")
@click.option("--probe-precision", type=click.FloatRange(0, 1, max_open=True), default=0.03, show_default=True,
              help="A profiling probe ends once its samples/s is known to +-this (95%); 0: run to --probe-steps.")
@click.option("--trial-seconds", "trial_s", type=click.FloatRange(0), default=60.0, show_default=True,
              help="Concurrent workers=auto: run the model's disjoint CPU sets and every app sharing every core "
                   "side by side for this long each, and keep the higher measured total (the text says whether "
                   "the difference is beyond the trials' noise); 0: no trials, the model's sets.")
@click.option("--refine/--no-refine", default=True, show_default=True,
              help="After the trials, allocate again from the curves corrected by the disjoint trial's per-app "
                   "rates (capped where an app's loop did not wait, scaled where it did) and, when the CPU sets "
                   "differ, run them as a third trial.")
@click.option("--cpus", callback=cpus_option, default=None, metavar="LIST",
              help="CPUs the apps may use, e.g. 0-15 (default: all CPUs this process may use).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop an app after this long (a row's `timeout_s` wins).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory: relative output_folders, report.html, submit.json "
                   "(default lotus-submit/<csv name>-<time>/).")
@click.option("--partition", default=None, help="Slurm partition (--executor slurm).")
@click.option("--time-min", type=click.IntRange(1), default=60, show_default=True,
              help="Slurm time limit per app in minutes (--executor slurm).")
@click.option("--no-report", is_flag=True, help="Do not write the HTML report.")
@click.option("--no-figures", is_flag=True, help="Report without figures (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print the table (or, with --dry-run, the plan) as JSON.")
def submit(apps_csv, mode, executor, dry_run, data_dir, generate, trainer, steps, probe_steps, probe_precision, trial_s,
           refine, cpus, timeout_s, out_dir, partition, time_min, no_report, no_figures, as_json) -> None:
    """Run the apps of APPS_CSV (torchloader's dl_submit.conf.csv columns: arch, depth, batch, workers,
    output_folder, port, submit_interval, cuda_device; or a `command` column), each through `lotus run`
    with its own trace directory, then print a table per app and write one report over all of them.

    \b
    lotus submit apps.csv --data /data/imagenet --mode concurrent
    lotus submit apps.csv --dry-run
    lotus submit apps.csv --executor slurm --partition gpu --time-min 30

    workers=auto gives concurrent apps disjoint CPU sets sized from each app's predicted throughput
    (short profiling probes + lotus.model). Exit code: 0 when every app exited 0, 1 when one failed,
    2 for bad input (nothing started), 130 after Ctrl-C (every app stopped, traces kept).
    """
    from lotus.submit.apps import AppsError, check_models, read_apps
    from lotus.submit.dispatch import known_curves
    from lotus.submit.dispatch import submit as run_submit
    from lotus.submit.plan import PlanOptions, build_plan
    from lotus.submit.results import plan_lines, probe_lines, table_lines
    from lotus.submit.trial import trial_lines

    if out_dir is None:
        out_dir = Path("lotus-submit") / f"{apps_csv.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        apps = read_apps(apps_csv)
        check_models(apps)
        if generate and data_dir is None:
            raise AppsError("--generate needs --data DIR (where the images go)")
        opts = PlanOptions(out_dir=out_dir, concurrent=mode == "concurrent", data_dir=data_dir, trainer=trainer,
                           steps=steps, probe_steps=probe_steps, probe_precision=probe_precision or None, cpus=cpus,
                           timeout_s=timeout_s, trial_s=trial_s, refine=refine)
        plan = build_plan(apps, opts, known_curves(apps) if dry_run else None)
        if data_dir is not None and not generate and not data_dir.is_dir() and \
                any(a.command is None for a in apps):
            raise AppsError(f"--data {data_dir}: no such directory (--generate N makes one)")
    except AppsError as exc:
        _bad_input(str(exc))
    slurm_params = {"partition": partition, "time": time_min}
    if executor == "slurm":
        from lotus.submit.slurm import SlurmUnavailable, check_slurm

        try:
            check_slurm()
        except SlurmUnavailable as exc:
            if not dry_run:
                _bad_input(str(exc))
            click.echo(f"lotus submit: note: {exc}", err=True)
    if dry_run:
        if as_json:
            from lotus.commands.analyze import echo_json

            echo_json({"dry_run": True, "executor": executor, **plan.to_dict()})
        else:
            for line in plan_lines(plan, executor, slurm_params if executor == "slurm" else None):
                click.echo(line)
            click.echo("dry run: nothing started")
        return
    if generate:
        from lotus.demo.dataset import DatasetSpec, generate_image_folder

        click.echo(f"lotus submit: generating {generate} images into {data_dir}", err=True)
        generate_image_folder(data_dir, DatasetSpec(images=generate), workers=4)
    on_start, on_end = _progress()
    if executor == "slurm":
        from lotus.submit.slurm import SlurmExecutor

        ex = SlurmExecutor(out_dir / "slurm", partition=partition, time_min=time_min, on_start=on_start,
                           on_end=on_end)
    else:
        from lotus.submit.local import LocalExecutor

        ex = LocalExecutor(on_start=on_start, on_end=on_end)
    result = run_submit(apps, opts, ex, report=not no_report, figures=not no_figures)
    if as_json:
        from lotus.commands.analyze import echo_json

        echo_json(result.to_dict())
    else:
        for line in probe_lines(result.probes) + trial_lines(result.trial) + table_lines(result.results):
            click.echo(line)
        if result.report is not None:
            click.echo(f"report: {result.report}")
        if result.results_file is not None:
            click.echo(f"results: {result.results_file}")
    if result.interrupted:
        click.echo("lotus submit: interrupted: every started app was stopped; traces kept", err=True)
        raise click.exceptions.Exit(130)
    raise click.exceptions.Exit(1 if result.failed else 0)
