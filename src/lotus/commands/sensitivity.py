"""``lotus sensitivity -- COMMAND...``: throughput over CPUs x page cache, and the job's demand vector."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands._params import control_option, fail, failed_probe_lines, probe_options, rate_text


def _list(kind, what: str):
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            return [kind(v) for v in value.split(",") if v.strip()]
        except ValueError:
            fail(f"{param.opts[0]} {value!r}: expected comma-separated {what}")

    return parse


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@probe_options()
@click.option("--cpus-grid", callback=_list(int, "integers"), default=None, metavar="LIST",
              help="CPU counts (default 1, 2, 4... up to the CPUs this process may use).")
@click.option("--cache-gb", callback=_list(float, "numbers"), default=None, metavar="LIST",
              help="Page-cache sizes in GB (default 0, 25, 50, 75, 100% of the dataset).")
@click.option("--target", type=click.FloatRange(0.1, 1.0), default=0.95, show_default=True,
              help="Demand = the fewest CPUs and GB reaching this share of the best throughput.")
@click.option("--max-probes", type=click.IntRange(1), default=6, show_default=True)
@click.option("--max-minutes", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Stop a probe after this long.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Probes' traces and results (default lotus-runs/sensitivity-<script>-<time>/); rerun into the "
                   "same directory to resume.")
@click.option("--fig", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Heatmap (PNG/SVG/PDF).")
@control_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def sensitivity(steps, precision, max_seconds, cpus_grid, cache_gb, target, max_probes, max_minutes, timeout_s, out,
                fig, control, as_json, command) -> None:
    """Throughput of COMMAND over CPU counts x page-cache sizes: a few probes measured, the rest predicted.

    Prints the matrix (measured points marked) and the job's demand vector: the fewest CPUs and GB of
    page cache that reach --target of the best throughput. No root, no containers: CPU affinity, the
    num_workers the model finds best for each CPU count, and the dataset's files evicted or kept in the
    page cache. Every probe is listed with its interval and what ended it; a failed one with its stderr.
    """
    from lotus.errors import InputError
    from lotus.launch.options import default_trace_dir, script_name
    from lotus.launch.runner import CommandNotFound, LaunchError, resolve_command
    from lotus.profile.matrix import check_grids
    from lotus.profile.sensitivity import sensitivity as run_profile
    from lotus.tune.tuner import allowed_cpus

    try:
        check_grids(cpus_grid, cache_gb, len(allowed_cpus()))
    except InputError as exc:
        fail(str(exc))
    if not command:
        raise click.UsageError("no command given: lotus sensitivity [OPTIONS] -- COMMAND [ARGS]...")
    try:
        command = resolve_command(list(command))
    except CommandNotFound as exc:
        click.echo(f"lotus: {exc}", err=True)
        raise click.exceptions.Exit(127) from None
    out = out or default_trace_dir([f"sensitivity-{script_name(command)}"])

    def progress(name):
        click.echo(f"lotus sensitivity: probe {name}...", err=True)

    try:
        profile = run_profile(command, out, steps=steps, precision=precision or None, max_seconds=max_seconds,
                              cpus_grid=cpus_grid, cache_grid_gb=cache_gb, target=target,
                              max_probes=max_probes, max_minutes=max_minutes, timeout_s=timeout_s, progress=progress,
                              control=control)
    except LaunchError as exc:
        raise click.UsageError(str(exc)) from None
    doc = profile.to_dict()
    from lotus.analysis.jsonutil import dumps

    Path(out, "sensitivity.json").write_text(dumps(doc))
    if not profile.matrix:
        first = profile.probes[0] if profile.probes else {}
        tail = (first.get("stderr_tail") or "").strip().splitlines()
        click.echo(f"lotus: error: the first probe failed (exit code {first.get('exit_code')})"
                   + (f": {tail[-1]}" if tail else "") + f"; traces in {out}", err=True)
        raise click.exceptions.Exit(1)
    from lotus.analysis.profiles import sensitivity_frame, sensitivity_heatmap

    figure = sensitivity_heatmap(sensitivity_frame(doc["matrix"]), demand=doc["demand"])
    fig_path = fig or Path(out, "sensitivity.png")
    figure.savefig(fig_path, dpi=120)
    if as_json:
        click.echo(dumps(doc))
        return
    _print(doc, out, fig_path)


def _print(doc: dict, out: Path, fig_path: Path) -> None:
    rows = doc["matrix"]
    caches = sorted({r["cache_gb"] for r in rows})
    cpus = sorted({r["cpus"] for r in rows})
    by = {(r["cpus"], r["cache_gb"]): r for r in rows}
    click.echo(f"lotus sensitivity: {out} ({doc['seconds']:.0f} s, {len(doc['probes'])} probes)")
    mc = doc.get("model_check") or {}
    pi = mc.get("prediction_interval")
    click.echo("  samples/s by page cache (GB, rows) x CPUs (columns), each with the num_workers the model finds "
               "best for those CPUs; * measured, ~ interpolated between measured CPU counts, others predicted"
               + (f" (+-{pi:.0%}: the probes' worst leave-one-out error)" if pi is not None else ""))
    click.echo("  " + " " * 10 + "".join(f"{c:>12d}" for c in cpus))
    workers = {c: by[(c, caches[-1])].get("num_workers") for c in cpus if (c, caches[-1]) in by}
    click.echo("  " + "workers".rjust(9) + " " + "".join(f"{workers.get(c, '-')!s:>12}" for c in cpus))
    for g in caches:
        cells = []
        for c in cpus:
            r = by.get((c, g))
            v = r and r["samples_per_s"]
            mark = {"measured": "*", "interpolated": "~"}.get((r or {}).get("how") or "", " ")
            cells.append(("-" if not v else f"{v:,.0f}") + (mark if r else " "))
        click.echo(f"  {g:>9g} " + "".join(f"{cell:>12s}" for cell in cells))
    measured = [r for r in rows if r["measured"]]
    ctl = doc.get("control") or {}
    if measured:
        click.echo("  measured points (shown as measured; the model's worker count beside when it differs):")
        for r in sorted(measured, key=lambda r: (r["cpus"], r["cache_gb"])):
            model = r.get("model_num_workers")
            other = (f"; the model's best is {model} workers ({r['predicted_samples_per_s']:,.0f} predicted)"
                     if model is not None and model != r["num_workers"] and r.get("predicted_samples_per_s") else "")
            twice = (f" (the mean of {ctl['first_probe']} and {ctl['repeat_probe']})"
                     if ctl and r.get("probe") == ctl["first_probe"] else "")
            click.echo(f"    {r['cpus']} CPUs, {r['num_workers']} workers, page cache {r.get('cache_state') or '-'}: "
                       f"{rate_text(r['samples_per_s'], r.get('ci95'))}{twice}{other}")
    _probes(doc["probes"], doc.get("model_check"))
    d = doc["demand"]
    if d:
        rate = rate_text(d["samples_per_s"], d.get("ci95")) if d["measured"] else (
            f"{d['samples_per_s']:,.0f} samples/s" + (f" ({d['pi95'][0]:,.0f}-{d['pi95'][1]:,.0f})" if d.get("pi95")
                                                     else ""))
        click.echo(f"  demand: {d['cpus']} CPUs ({d.get('num_workers')} workers) and {d['cache_gb']:g} GB of page "
                   f"cache reach {rate} ({d['share_of_best']:.0%} of the best, {d['best_samples_per_s']:,.0f}; target "
                   f">= {doc['target']:.0%}) ({d.get('how') or ('measured' if d['measured'] else 'predicted')})")
    if doc.get("full_sweep_estimate_s"):
        click.echo(f"  a full sweep would take about {doc['full_sweep_estimate_s']:.0f} s "
                   f"({doc['share_of_full_sweep']:.0%} of it spent here)")
    for n in doc["notes"]:
        click.echo(f"  note: {n}")
    click.echo(f"  heatmap: {fig_path}")


def _probes(probes: list[dict], model_check: dict | None = None) -> None:
    """Every probe: CPUs, workers, page cache, samples/s with its interval, why it ended; failed ones' stderr."""
    from lotus.analysis.steady import ended_by

    checks = {c["name"]: c for c in (model_check or {}).get("probes", [])}
    click.echo(f"  {'probe':<18} {'CPUs':>4} {'workers':>7} {'samples/s':>10} {'95% CI':>19} {'predicted':>10} "
               f"{'error':>6} {'loo':>6}  {'wall s':>7} {'ended by':<10} page cache")
    for p in probes:
        rate = f"FAILED {p['exit_code']}" if p["exit_code"] else (
            "-" if p.get("samples_per_s") is None else f"{p['samples_per_s']:,.1f}")
        ci = f"{p['ci95'][0]:,.1f}-{p['ci95'][1]:,.1f}" if p.get("ci95") else "-"
        c = checks.get(p["name"]) or {}
        before = p.get("predicted_before")

        def pct(x):
            return "-" if x is None else f"{x:+.0%}"

        click.echo(f"  {p['name']:<18} {p['cpus']:>4} {p['num_workers']!s:>7} {rate:>10} {ci:>19} "
                   f"{'-' if before is None else f'{before:,.1f}':>10} {pct(c.get('error_before')):>6} "
                   f"{pct(c.get('loo_error')):>6}{'!' if c.get('disagrees') else ' '} "
                   f"{p.get('wall_s') or 0:>7.1f} {ended_by(p.get('stopped_by'), p['exit_code']):<10} "
                   f"{p.get('cache_state') or '-'}")
    if checks:
        click.echo("  predicted: the model's prediction made before the probe; error: it against the measurement; "
                   "loo: the model of every other probe; !: off by more than the probe's interval + 10%")
    for p in probes:
        if p["exit_code"]:
            for line in failed_probe_lines(p["name"], p["exit_code"], p.get("stderr_tail") or ""):
                click.echo(line)
