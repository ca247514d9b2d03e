"""``lotus analyze ranks``: stragglers across ranks and nodes, and whether their input pipeline or their
step holds the others back."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import data_dir_option, ms, pct, per_config


@click.command(short_help="Stragglers across ranks and nodes: who holds the others back, and why.")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ranks_cmd(data_dir: Path, as_json: bool) -> None:
    """Per rank and per node: samples/s, the loop's wait share, the slowest op, worker busy share, GPU
    idle from data; at each step (ranks aligned by epoch and batch), the rank the others waited for in
    the collective, and whether its input pipeline or its step made it late.

    A job whose nodes wrote into directories of their own (DATA_DIR/node0, DATA_DIR/node1...) is one run."""
    from types import SimpleNamespace

    from lotus.analysis.rankmap import rank_report_of_run
    from lotus.analysis.runs import iter_runs

    runs = iter_runs(data_dir, lambda run: SimpleNamespace(name=run.name, report=rank_report_of_run(run)))
    per_config(data_dir, lambda got: got.report, _print, as_json, configs=runs)


def _print(name: str, r: dict) -> None:
    from lotus.analysis.ranks import straggler_text

    coll = r["collective"]
    nodes = len(r["nodes"])
    loader = "per rank" if r["loader"] is None else r["loader"]
    click.echo(f"{name}: {len(r['ranks'])} rank(s) on {nodes} node(s), loader {loader}, "
               f"{coll.get('steps', 0)} steps aligned" + (" (lockstep)" if coll.get("lockstep") else ""))
    if r["missing_ranks"]:
        click.echo(f"  missing: rank(s) {_ranges(r['missing_ranks'])} of {r['world_size']} (no trace files)")
    click.echo(f"  {straggler_text(r['straggler'], coll)}")
    if coll.get("note"):
        click.echo(f"  note: {coll['note']}")
    click.echo("  per rank:")
    _table([["rank", "node"], *[[str(x["rank"]), str(x["node"])] for x in r["ranks"]]], r["ranks"])
    if nodes > 1:
        click.echo("  per node:")
        _table([["node", "ranks"], *[[str(x["node"]), _ranges(x["ranks"])] for x in r["nodes"]]], r["nodes"])
    if coll.get("steps"):
        sp = coll["spread_ms"]
        paid = (f"; the collective paid {coll['cost_s']:.3g} s ({pct(coll['cost_share'])} of the loop)"
                if "cost_s" in coll else "")
        click.echo(f"  hand-offs per step: spread median {ms(sp['median'], 0)} ms, p90 {ms(sp['p90'], 0)} ms, "
                   f"max {ms(sp['max'], 0)} ms{paid}")
        for w in coll.get("worst_steps") or []:
            click.echo(f"    epoch {w['epoch']} batch {w['batch_id']}: rank {w['rank']} late {ms(w['late_ms'], 0)} ms "
                       f"(input {ms(w['input_ms'], 0)}, step {ms(w['step_ms'], 0)}): {w['cause']}")
    click.echo("  (slowest: share of the steps a rank was the last to start; held s: how long the others waited for "
               "it in the collective, by cause)")
    click.echo("")


def _table(lead: list[list[str]], rows: list[dict]) -> None:
    """Rows of ranks or nodes: ``lead`` (header and the leading cells of each row) then the figures."""
    head = ["samples/s", "95% CI", "wait", "slowest op", "busy", "GPU idle", "slowest", "held s", "input", "step"]
    cells = [lead[0] + head]
    for lc, x in zip(lead[1:], rows, strict=True):
        lo, hi = (x["ci95_lo"], x["ci95_hi"]) if "ci95_lo" in x else (x["ci95"] or [None, None])
        cells.append([*lc, "-" if x["samples_per_s"] is None else f"{x['samples_per_s']:,.1f}",
                      "-" if lo is None else f"{lo:,.1f}-{hi:,.1f}", pct(x["wait_share"]), _op(x),
                      pct(x["worker_busy_share"]), pct(x["gpu_data_idle_share"]), pct(x["slowest_share"]),
                      *(f"{x[k]:.2f}" for k in ("held_s", "held_input_s", "held_step_s"))])
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    for c in cells:
        click.echo("    " + "  ".join(v.ljust(w) if i < len(lead[0]) else v.rjust(w)
                                      for i, (v, w) in enumerate(zip(c, widths, strict=True))))


def _op(x: dict) -> str:
    return "-" if not x["slowest_op"] else f"{x['slowest_op'][:24]} {pct(x['slowest_op_share'])}"


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, vals = [], sorted(values)
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out)
