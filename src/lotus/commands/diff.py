"""``lotus diff RUN_A RUN_B``: per-op and per-batch changes between two runs."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import echo_json, ms, pct


def _batches(cfg):
    """A scanned run's table (diff makes a DataFrame of only the columns it reads), else the batches."""
    return cfg.table if cfg.table is not None and not cfg.table.partial else cfg.batches


@click.command()
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--top", type=int, default=10, show_default=True, help="Most slowed-down batches listed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def diff(run_a: Path, run_b: Path, top: int, as_json: bool) -> None:
    """What got slower or faster from RUN_A (baseline) to RUN_B: ops, batches, loop wait."""
    from lotus.analysis.diff import diff_runs
    from lotus.analysis.runs import load_config

    a, b = load_config(run_a, engine="auto"), load_config(run_b, engine="auto")
    d = diff_runs(a.events, _batches(a), b.events, _batches(b), top=top)
    if as_json:
        echo_json({"a": str(run_a), "b": str(run_b), **d})
        return
    click.echo(f"A = {a.name} ({run_a})\nB = {b.name} ({run_b})   change = B - A, positive = slower in B")
    click.echo(f"  {'mean per call (ms)':24}{'A':>10}{'B':>10}{'change':>10}{'change %':>10}")
    rows = [("batch preprocessing", d["batch_preprocessing_ms"]), *d["ops_ms"].items()]
    for label, r in rows:
        m = r["mean"]
        chg = "-" if m["change_pct"] is None else f"{m['change_pct']:+.1f}%"
        click.echo(f"  {label[:24]:24}{ms(m['a'], 10)}{ms(m['b'], 10)}{ms(m['change'], 10)}{chg:>10}")
    w = d["wait_share"]
    if w["a"] is not None or w["b"] is not None:
        click.echo(f"  loop waiting for data: {pct(w['a'])} -> {pct(w['b'])}")
    bt = d["batches"]
    med = "-" if bt["median_change_ms"] is None else f"{bt['median_change_ms']:+.3g} ms"
    click.echo(f"  batches matched {bt['matched']} (only in A {bt['only_in_a']}, only in B {bt['only_in_b']}): "
               f"{bt['slower']} slower, {bt['faster']} faster, median change {med}")
    for k, what in (("failed", "failed batches (not compared)"), ("exhausted", "exhausted fetches (not batches)")):
        if bt[k]["a"] or bt[k]["b"]:
            click.echo(f"  {what}: A {bt[k]['a']}, B {bt[k]['b']}")
    if bt["most_slowed"]:
        click.echo("  most slowed-down batches (rank/loader/epoch/batch: A -> B ms):")
        for r in bt["most_slowed"]:
            click.echo(f"    {r['rank']}/{r['loader']}/{r['epoch']}/{r['batch_id']}: {ms(r['a_ms'], 0)} -> "
                       f"{ms(r['b_ms'], 0)} ({r['change_ms']:+.3g})")
    if d["slower"]:
        click.echo("  slower: " + ", ".join(f"{s['what']} {s['change_pct']:+.1f}%" for s in d["slower"]))
    else:
        click.echo("  nothing got slower on average")
