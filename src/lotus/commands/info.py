"""``lotus info``: the runs of a directory, their files, loaders, time span and event counts."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import data_dir_option, echo_outcomes, per_config


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(data_dir: Path, as_json: bool) -> None:
    """List runs, their trace files (role, pid, rank, worker, events, clean close), loaders and event counts."""
    from lotus.analysis.info import run_info

    def compute(cfg) -> dict:
        return {**run_info(cfg.events, cfg.summary_batches), "kineto": [str(p) for p in cfg.kineto]}

    # a large run: scanned, records counted, its batches a compact table (no per-batch DataFrame)
    per_config(data_dir, compute, _print, as_json, key="runs", census=True, summary_only=True)


def _print(name: str, inf: dict) -> None:
    span = inf["span"]
    dur = f"{span['duration_s']:.3f} s" if span else "-"
    click.echo(f"{name}  ({inf['path']})")
    click.echo(f"  {inf['events']} events over {dur}; ranks {inf['ranks']}; epochs {inf['epochs']}; "
               f"batches prepared {inf['batches']['prepared']}, consumed {inf['batches']['consumed']}")
    click.echo("  files:")
    click.echo(f"    {'role':7} {'pid':>8} {'rank':>4} {'worker':>6} {'events':>10}  {'closed':7} file")
    for f in inf["files"]:
        closed = {True: "clean", False: "NO", None: "n/a"}[f["clean_close"]]
        worker = "-" if f["worker_id"] in (None, -1) else str(f["worker_id"])
        click.echo(f"    {f['role']:7} {f['pid']!s:>8} {f['rank']!s:>4} {worker:>6} {f['events']:>10}  {closed:7} "
                   f"{Path(f['path']).name}")
    echo_outcomes(inf["batches"], dispatched=True, lead="also")
    if inf["unclean_files"]:
        click.echo(f"  {inf['unclean_files']} file(s) without an end record: killed or still running processes")
    for key, desc in inf["loaders"].items():
        settings = ", ".join(f"{k}={desc[k]}" for k in ("dataset", "batch_size", "num_workers", "prefetch_factor",
                                                          "persistent_workers", "pin_memory", "in_order")
                             if isinstance(desc, dict) and k in desc)
        click.echo(f"  loader {key}: {settings}")
    if inf.get("kineto"):
        click.echo(f"  torch.profiler traces: {', '.join(Path(p).name for p in inf['kineto'])}")
    counts = sorted(inf["event_counts"].items(), key=lambda kv: -kv[1])
    click.echo("  events: " + ", ".join(f"{k} {v}" for k, v in counts))
    click.echo("")
