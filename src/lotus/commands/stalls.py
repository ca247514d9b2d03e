"""``lotus stalls -- COMMAND...``: compute, prep stall and fetch stall of a job, from three short probes."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands._params import cpus_option, failed_probe_lines, probe_options, rate_text


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@probe_options()
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
def stalls(steps, precision, max_seconds, data, workers, cpus, out, timeout_s, as_json, command) -> None:
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
                            timeout_s=timeout_s, precision=precision or None, max_seconds=max_seconds,
                            progress=lambda name: click.echo(f"lotus stalls: probe '{name}'...", err=True))
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    first = report.probes.get("listing")
    if first is not None and (first.exit_code != 0 or first.note):
        click.echo(f"lotus: error: the first probe failed: {first.note} (traces in {out})", err=True)
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
    def ms(key):
        v, share, ci = d[f"{key}_ms"], d[f"{key}_share"], d.get(f"{key}_share_ci95")
        if v is None:
            return "-"
        band = f", 95% CI {ci[0]:.0%}-{ci[1]:.0%}" if ci else ""
        return f"{v:8.2f} ms ({share:.0%}{band})"

    click.echo(f"lotus stalls: {d['out']}")
    click.echo(f"  ingestion (compute only): {rate_text(d['ingestion_samples_per_s'], d.get('ingestion_ci95'))}")
    click.echo(f"  warm page cache:          {rate_text(d['prep_samples_per_s'], d.get('prep_ci95'))}")
    click.echo(f"  cold page cache:          {rate_text(d['fetch_samples_per_s'], d.get('fetch_ci95'))}")
    if d["compute_ms"] is not None:
        click.echo(f"  per iteration of {d['batch_size']} samples:")
        click.echo(f"    compute        {ms('compute')}")
        if d.get("loop_overhead_ms") is not None:
            click.echo(f"    loop overhead  {ms('loop_overhead')}")
        click.echo(f"    prep stall     {ms('prep_stall')}")
        click.echo(f"    fetch stall    {ms('fetch_stall')}")
    if d.get("stall_source") == "measured wait":
        click.echo(f"  prep stall: the loop's measured wait in the warm run ({d['warm_measured_wait_share']:.0%}); "
                   f"DS-Analyzer's differential analysis would say {d['differential_stall_share']:.0%}")
    elif d.get("stall_source") == "differential":
        click.echo("  prep stall: differential (warm iteration - compute): the warm run traced no waits")
    _probes(d.get("probes") or {})
    for note in d["notes"]:
        click.echo(f"  note: {note}")


def _probes(probes: dict) -> None:
    """Every probe: samples/s with its interval, wall time and why it ended; failed ones' stderr tail."""
    from lotus.analysis.steady import ended_by

    click.echo(f"  {'probe':<10} {'samples/s':>10} {'95% CI':>19} {'wall s':>7} ended by")
    for p in probes.values():
        rate = f"FAILED {p['exit_code']}" if p["exit_code"] else (
            "-" if p.get("samples_per_s") is None else f"{p['samples_per_s']:,.1f}")
        ci = f"{p['ci95'][0]:,.1f}-{p['ci95'][1]:,.1f}" if p.get("ci95") else "-"
        click.echo(f"  {p['name']:<10} {rate:>10} {ci:>19} {p['wall_s']:>7.1f} "
                   f"{ended_by(p.get('stopped_by'), p['exit_code'])}")
    for p in probes.values():
        if p["exit_code"]:
            for line in failed_probe_lines(p["name"], p["exit_code"], p.get("stderr_tail") or ""):
                click.echo(line)
