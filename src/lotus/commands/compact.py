"""``lotus compact``: a finished run's trace parts -> one compressed file per process."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--keep", is_flag=True, help="Keep the original files (the run then holds both: move one away).")
def compact(run_dir: Path, keep: bool) -> None:
    """Stitch rotated parts and compress a finished run's traces (zstd), once; originals removed after."""
    from lotus.trace.compact import compact_run

    r = compact_run(run_dir, keep=keep)
    per = r["records"] or 1
    click.echo(f"{run_dir}: {r['files_before']} file(s) of {r['processes']} process(es), {r['compacted']} compacted; "
               f"{r['bytes_before'] / 2**20:,.1f} MiB -> {r['bytes_after'] / 2**20:,.1f} MiB "
               f"({r['bytes_before'] / per:.1f} -> {r['bytes_after'] / per:.1f} bytes per record)")
