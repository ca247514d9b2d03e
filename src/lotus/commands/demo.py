"""``lotus demo``: generate a JPEG dataset, train a small model with the traced DataLoader, summarise."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option("--out", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("lotus-demo"),
              show_default=True, help="Directory for the dataset and the traces.")
@click.option("--images", type=click.IntRange(16), default=800, show_default=True, help="Images to generate.")
@click.option("--steps", type=click.IntRange(1), default=40, show_default=True, help="Training steps.")
@click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--workers", type=click.IntRange(0), default=2, show_default=True, help="DataLoader workers.")
@click.option("--model", default="auto", show_default=True,
              help="torchvision model name; auto = resnet18 on CUDA, mobilenet_v3_small on CPU.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--image-px", type=click.IntRange(32), default=224, show_default=True, help="Crop size.")
@click.option("--itt/--no-itt", default=False, help="Also emit ITT tasks for Intel VTune.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def demo(root: Path, images: int, steps: int, batch_size: int, workers: int, model: str, device: str,
         image_px: int, itt: bool, seed: int, as_json: bool) -> None:
    """Train a small torchvision model on a generated JPEG dataset, traced by lotus, and summarise.

    Everything stays under --out: data/ (generated once, ImageNet-like JPEGs made from real
    photographs) and runs/<time>/ (the trace of this run).
    """
    import json

    from lotus.demo.summary import summarize
    from lotus.demo.train import DemoConfig, run_demo

    cfg = DemoConfig(root=root, images=images, steps=steps, batch_size=batch_size, workers=workers,
                     model=model, device=device, image_px=image_px, itt=itt, seed=seed)
    bars: dict[str, object] = {}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            label = "generating images" if phase == "dataset" else "training        "
            bar = bars[phase] = click.progressbar(length=total, label=label, file=sys.stderr,
                                                  show_pos=True)
            bar.__enter__()
        bar.update(done - bar.pos)
        if done >= total:
            bar.__exit__(None, None, None)

    result = run_demo(cfg, progress)
    for bar in bars.values():
        if not bar.finished:
            bar.__exit__(None, None, None)
    summary = summarize(result)
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
    else:
        for line in summary["lines"]:
            click.echo(line)
