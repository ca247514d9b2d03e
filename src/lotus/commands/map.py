"""``lotus map``: LotusMap, which native functions each Python op runs (``run``) or ran (``import``)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

_log = logging.getLogger("lotus.map")


def _short(key: str, n: int = 48) -> str:
    name = key.rpartition("|")[0] or key
    return name if len(name) <= n else name[: n - 1] + "…"


def _summary(mapping: dict, top: int = 3) -> None:
    weights = mapping.get("weights") or {}
    meta = mapping.get("lotus", {})
    for op, funcs in mapping["op_to_func"].items():
        w = weights.get(op, {})
        head = ", ".join(f"{_short(f)} {w[f]:.0%}" if f in w else _short(f) for f in funcs[:top])
        extra = f" (+{len(funcs) - top} more)" if len(funcs) > top else ""
        samples = meta.get("samples", {}).get(op)
        n = f" [{samples} samples]" if samples is not None else ""
        click.echo(f"  {op:<22} {len(funcs):>3} functions{n}: {head}{extra}")
    for op, err in (meta.get("errors") or {}).items():
        click.echo(f"  {op:<22} not mapped: it raised {err}", err=True)


@click.group("map")
def map_group() -> None:
    """LotusMap: map Python ops to the native functions they run (py-spy, VTune or uProf)."""


@map_group.command("run")
@click.argument("more_ops", nargs=-1, metavar="[OP]...")
@click.option("--ops", "ops", multiple=True, metavar="OP",
              help="Ops to map: `--ops Loader RandomResizedCrop`, `--ops Loader --ops ToTensor` or "
                   "`--ops \"Loader ToTensor\"`. Default: all.")
@click.option("--pipeline", metavar="MODULE:OBJECT",
              help="Your transforms: a Compose, a list of transforms or one callable (default: the ImageNet "
                   "training transforms).")
@click.option("--image", type=click.Path(dir_okay=False, path_type=Path),
              help="JPEG to load (default: a 600x400 photo shipped with lotus).")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Measured runs per op.")
@click.option("--backend", type=click.Choice(["auto", "pyspy", "vtune", "uprof"]), default="auto", show_default=True,
              help="auto = vtune where installed, else pyspy.")
@click.option("--seconds", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Time each op is called in a loop, per run.")
@click.option("--rate", type=click.IntRange(min=1, max=10000), default=250, show_default=True,
              help="py-spy samples per second.")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True,
              help="Samples per batch for Collation.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="torch threads in the workload (DataLoader workers use 1).")
@click.option("--min-support", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Keep a function for an op if seen in at least this fraction of the op's runs (0 = union).")
@click.option("--symbols-from", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A build of a stripped library with symbols, to name its functions (repeatable).")
@click.option("--no-borrow-names", is_flag=True,
              help="Do not name stripped functions after similar functions of other builds found nearby.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the workload, profiler output and logs here (default: a temporary directory).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="Seconds allowed for the workload.")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Mapping JSON to write.")
def run_cmd(more_ops, ops, pipeline, image, runs, backend, seconds, rate, batch_size, threads, min_support,
            symbols_from, no_borrow_names, work_dir, timeout_s, out) -> None:
    """Run each op in isolation under a profiler and write the op -> native functions mapping.

    The ops are Loader (PIL open + convert RGB), the transforms (default: RandomResizedCrop,
    RandomHorizontalFlip, ToTensor, Normalize) and Collation; OPs given as arguments are added to --ops.
    """
    from lotus.map.mapping import save_mapping
    from lotus.map.run import map_run

    names = [n for item in (*ops, *more_ops) for n in item.replace(",", " ").split()]
    mapping = map_run(ops=names or None, pipeline=pipeline, image=image, runs=runs, backend=backend,
                      seconds=seconds, rate=rate, batch_size=batch_size, threads=threads, min_support=min_support,
                      work_dir=work_dir, timeout_s=timeout_s, symbols_from=list(symbols_from) or None,
                      borrow_names=not no_borrow_names)
    save_mapping(mapping, out)
    meta = mapping["lotus"]
    click.echo(f"lotus map: {len(mapping['op_to_func'])} op(s) mapped with {meta['backend']}, "
               f"{runs} run(s) -> {out}")
    _summary(mapping)
    if meta.get("errors"):
        _log.warning("%d op(s) raised and were not mapped: %s", len(meta["errors"]), ", ".join(meta["errors"]))


@map_group.command("import")
@click.option("--vtune", "vtune_dir", type=click.Path(path_type=Path),
              help="Directory <Op>/<run>.csv of `vtune -report hotspots -format csv` files.")
@click.option("--uprof", "uprof_dir", type=click.Path(path_type=Path),
              help="Directory <Op>/<run>.csv of AMDuProfCLI report CSVs.")
@click.option("--min-support", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Keep a function for an op if seen in at least this fraction of the op's runs (0 = union).")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Mapping JSON to write.")
def import_cmd(vtune_dir, uprof_dir, min_support, out) -> None:
    """Build the mapping from VTune hotspot or uProf reports of ops run in isolation."""
    from lotus.map.mapping import import_mapping, save_mapping

    if (vtune_dir is None) == (uprof_dir is None):
        raise click.UsageError("give exactly one of --vtune DIR or --uprof DIR")
    kind, root = ("vtune", vtune_dir) if vtune_dir is not None else ("uprof", uprof_dir)
    mapping = import_mapping(root, kind, min_support=min_support)
    save_mapping(mapping, out)
    runs = mapping["lotus"]["runs"]
    click.echo(f"lotus map: {len(mapping['op_to_func'])} op(s), {sum(runs.values())} run file(s) from {root} -> {out}")
    _summary(mapping)
