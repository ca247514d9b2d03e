"""``lotus hw``: hardware metrics (VTune microarchitecture grids) attributed to Python ops through a mapping."""

from __future__ import annotations

from pathlib import Path

import click


def _write(df, out_dir: Path, name: str) -> list[Path]:
    csv = out_dir / f"{name}.csv"
    parquet = out_dir / f"{name}.parquet"
    df.to_csv(csv, index=False)
    df.to_parquet(parquet, index=False)
    return [csv, parquet]


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
    for p in paths:
        fig.savefig(p, dpi=120 if p.suffix == ".png" else None)
    return paths


@click.command("hw")
@click.option("--mapping", "mapping_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Mapping JSON (from `lotus map run/import`, or the study's mapping_funcs.json).")
@click.option("--uarch-dir", required=True, type=click.Path(path_type=Path),
              help="VTune microarchitecture grids, one file per config (and optional *summary* files).")
@click.option("--trace-dir", type=click.Path(path_type=Path),
              help="Traced run(s): split functions shared by ops by each op's traced CPU time.")
@click.option("--out-dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Where to write.")
@click.option("--top", type=click.IntRange(min=1), default=12, show_default=True,
              help="Native functions shown by name in the stacked bars.")
def hw(mapping_path, uarch_dir, trace_dir, out_dir, top) -> None:
    """Attribute CPU time, clockticks, instructions, CPI and top-down shares to Python ops."""
    from lotus.map import plots
    from lotus.map.hw import SHARED_PREFIX, hw_tables
    from lotus.map.mapping import load_mapping

    mapping = load_mapping(mapping_path)
    tables = hw_tables(uarch_dir, mapping, trace_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = _write(tables["functions"], out_dir, "hw_functions") + _write(tables["ops"], out_dir, "hw_ops")
    if "trace" in tables:
        written += _write(tables["trace"], out_dir, "trace_ops")
    if "summary" in tables:
        written += _write(tables["summary"], out_dir, "vtune_summary")
    functions, ops = tables["functions"], tables["ops"]
    for metric in ("cpu_time_s", "clockticks", "instructions_retired"):
        if metric in functions.columns:
            written += _save(plots.plot_function_stacks(functions, metric, top), out_dir, f"functions_{metric}")
    if any(c in functions.columns for c in ("retiring_frac", "front_end_bound_frac")):
        written += _save(plots.plot_function_topdown(functions, min(top, 15)), out_dir, "functions_topdown")
    written += _save(plots.plot_op_metrics(ops), out_dir, "ops_metrics")
    if "trace" in tables and not tables["trace"].empty:
        written += _save(plots.plot_trace_ops(tables["trace"]), out_dir, "trace_ops")
    if "summary" in tables and "elapsed_time_s" in tables["summary"].columns:
        written += _save(plots.plot_elapsed(tables["summary"]), out_dir, "vtune_elapsed")

    basis = set(tables["split_basis"].values())
    shared = ops[ops["op"].str.startswith(SHARED_PREFIX)]
    click.echo(f"lotus hw: {len(tables['split_basis'])} config(s), {ops['op'].nunique()} op rows -> {out_dir}")
    if trace_dir is None and not shared.empty:
        click.echo("  functions shared by several ops are reported as '[shared] ...' (give --trace-dir to split them)")
    elif "pooled" in basis:
        click.echo("  shared functions split by op CPU time pooled over all traced runs (no run named like a config)")
    cols = [c for c in ("cpu_time_s", "cpi", "retiring_frac", "memory_bound_frac") if c in ops.columns]
    for _, row in ops.iterrows():
        vals = "  ".join(f"{c}={row[c]:.3g}" for c in cols if row[c] == row[c])
        click.echo(f"  {row['config']:<28} {row['op']:<26} {vals}")
    click.echo(f"  wrote {len(written)} files")
