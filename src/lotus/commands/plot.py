"""``lotus plot``: figures of preprocessing, ops, waits and workers (PNG and SVG)."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import data_dir_option, writing


@click.command()
@data_dir_option
@click.option("--out-dir", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the figures.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["png", "svg", "pdf"]),
              default=("png", "svg"), show_default=True, help="Image format(s), repeatable.")
@click.option("--remove-outliers", is_flag=True, help="Drop batches below q1 - 2*IQR from the box plot.")
@click.option("--sort", type=click.Choice(["batch_id", "duration"]), default="batch_id", show_default=True,
              help="Wait figure: per batch in consumption order, or sorted by duration.")
def plot(data_dir: Path, out_dir: Path, formats: tuple[str, ...], remove_outliers: bool, sort: str) -> None:
    """Box plot of batch preprocessing per config, per-op distributions, CPU seconds per op, wait and
    delay per batch, and a worker timeline."""
    from lotus.analysis.plots import all_figures, save_figure
    from lotus.analysis.runs import load_configs

    # large runs: the scan engine (same figures), keeping the op durations the figures sample: one pass
    configs = load_configs(data_dir, engine="auto", op_reduce="values")
    n = 0
    for name, fig in all_figures(configs, remove_outliers=remove_outliers, sort=sort):
        with writing(out_dir):
            paths = save_figure(fig, out_dir, name, formats)
        del fig  # drawn: the next is made without it (all_figures)
        for p in paths:
            click.echo(f"wrote {p}")
            n += 1
    click.echo(f"{n} files in {out_dir}")
