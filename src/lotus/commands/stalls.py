"""``lotus stalls -- COMMAND...``: compute, prep stall and fetch stall of a job, from three short probes."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands._params import cpus_option


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--steps", type=click.IntRange(5), default=50, show_default=True, help="Batches per probe.")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None,
              help="The dataset's files (a directory), when the job's dataset does not list them.")
@click.option("--workers", type=click.IntRange(0), default=None, help="Override num_workers in every probe.")
@click.option("--cpus", callback=cpus_option, default=None, metavar="LIST", help="CPU affinity of every probe.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the probes' traces go (default lotus-runs/stalls-<script>-<time>/).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop a probe after this long.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def stalls(steps, data, workers, cpus, out, timeout_s, as_json, command) -> None:
    """Split a training step into compute, prep stall and fetch stall (DS-Analyzer's analysis).

    Runs COMMAND four times for --steps batches: listing the dataset's files, warm page cache, cold
    page cache (files evicted, no root needed) and with lotus replaying prepared batches (the loop's
    ingestion limit). Nothing in the script changes.
    """
    from lotus.launch.options import default_trace_dir, script_name
    from lotus.launch.runner import CommandNotFound, LaunchError, resolve_command
    from lotus.profile.stalls import stalls as run_stalls

    if not command:
        raise click.UsageError("no command given: lotus stalls [OPTIONS] -- COMMAND [ARGS]...")
    try:
        command = resolve_command(list(command))
    except CommandNotFound as exc:
        click.echo(f"lotus: {exc}", err=True)
        raise click.exceptions.Exit(127) from None
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    out = out or default_trace_dir([f"stalls-{script_name(command)}"])
    try:
        report = run_stalls(command, out, steps=steps, data=str(data) if data else None, workers=workers, cpus=cpus,
                            timeout_s=timeout_s,
                            progress=lambda name: click.echo(f"lotus stalls: probe '{name}'...", err=True))
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    first = report.probes.get("listing")
    if first is not None and (first.exit_code != 0 or first.note):
        lines = first.stderr_tail.strip().splitlines()
        tail = f"; its stderr ends with: {lines[-1]}" if lines else ""
        click.echo(f"lotus: error: the first probe failed: {first.note}{tail} (traces in {out})", err=True)
        raise click.exceptions.Exit(1)
    doc = report.to_dict()
    doc["out"] = str(out)
    (Path(out) / "stalls.json").write_text(_dumps(doc))
    if as_json:
        click.echo(_dumps(doc))
    else:
        _print(doc)
    if any(p.exit_code != 0 for p in report.probes.values()):
        raise click.exceptions.Exit(1)


def _dumps(doc) -> str:
    from lotus.analysis.jsonutil import dumps

    return dumps(doc)


def _print(d: dict) -> None:
    def rate(v):
        return "-" if v is None else f"{v:,.1f}"

    def ms(v, share):
        return "-" if v is None else f"{v:8.2f} ms ({share:.0%})"

    click.echo(f"lotus stalls: {d['out']}")
    click.echo(f"  samples/s: ingestion (compute only) {rate(d['ingestion_samples_per_s'])}, "
               f"warm cache {rate(d['prep_samples_per_s'])}, cold cache {rate(d['fetch_samples_per_s'])}")
    if d["compute_ms"] is not None:
        click.echo(f"  per iteration of {d['batch_size']} samples:")
        click.echo(f"    compute      {ms(d['compute_ms'], d['compute_share'])}")
        click.echo(f"    prep stall   {ms(d['prep_stall_ms'], d['prep_stall_share'])}")
        click.echo(f"    fetch stall  {ms(d['fetch_stall_ms'], d['fetch_stall_share'])}")
    for note in d["notes"]:
        click.echo(f"  note: {note}")
