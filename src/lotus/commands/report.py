"""``lotus report``: one self-contained HTML page (plus report.json)."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import data_dir_option, writing


@click.command()
@data_dir_option
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The HTML file; report.json is written next to it.")
@click.option("--remove-outliers", is_flag=True, help="Drop batches below q1 - 2*IQR from the statistics.")
@click.option("--no-figures", is_flag=True, help="Numbers and tables only (faster, smaller).")
def report(data_dir: Path, out: Path, remove_outliers: bool, no_figures: bool) -> None:
    """Verdict, headline numbers, tables and figures in one HTML file (no network needed to view it)."""
    from lotus.analysis.report import write_report
    from lotus.analysis.runs import load_configs

    # a scanned run keeps what the trends and figures read of its op records: the files are read once
    configs = load_configs(data_dir, engine="auto", op_reduce="batches" if no_figures else "values")
    with writing(out):
        html_path, json_path = write_report(configs, out, remove_outliers=remove_outliers,
                                            figures=not no_figures, data_dir=str(data_dir))
    click.echo(f"wrote {html_path} and {json_path} ({len(configs)} config(s))")
