"""``lotus export``: events and batches of every run as Parquet."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import configs_of, data_dir_option, writing


@click.command()
@data_dir_option
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory: OUT/<config>/{events,batches}.parquet.")
def export(data_dir: Path, out_dir: Path) -> None:
    """Export the events and batches DataFrames of every run to Parquet."""
    from lotus.analysis.export import export_parquet
    from lotus.analysis.plots import safe_name

    n = 0
    for cfg in configs_of(data_dir):
        # a scanned run's batches: its table, written a piece at a time (never the whole DataFrame)
        batches = cfg.batches if cfg.table is None or cfg.table.partial else cfg.table
        with writing(out_dir):
            paths = export_parquet(cfg.events, batches, out_dir / safe_name(cfg.name))
        n_events = sum(f.get("events", 0) for f in cfg.files) if "op_engine" in cfg.events.attrs else len(cfg.events)
        click.echo(f"{cfg.name}: {n_events} events, {len(batches)} batches -> "
                   + ", ".join(str(p) for p in paths))
        n += 1
    click.echo(f"{n} config(s) exported to {out_dir}")
