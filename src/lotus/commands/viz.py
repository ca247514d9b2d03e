"""``lotus viz``: a Chrome/Perfetto trace (JSON) of one traced run, optionally merged into torch.profiler traces."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import data_dir_option, writing


@click.command()
@data_dir_option
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (.json, or .json.gz for gzip).")
@click.option("--coarse", is_flag=True, help="Leave out per-sample and per-op slices (smaller, faster to open).")
@click.option("--merge", "merge", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A torch.profiler (Kineto) JSON trace to merge lotus's events into (repeatable). "
              "Default: the *.pt.trace.json files found in the run directory.")
@click.option("--no-merge", is_flag=True, help="Do not merge the torch.profiler traces found in the run directory.")
def viz(data_dir: Path, out: Path, coarse: bool, merge: tuple[Path, ...], no_merge: bool) -> None:
    """Write a Chrome Trace Event JSON of a run for ui.perfetto.dev or chrome://tracing."""
    from lotus.analysis.chrome import write_chrome_trace
    from lotus.analysis.runs import load_config

    cfg = load_config(data_dir)
    kineto = list(merge) or ([] if no_merge else cfg.kineto)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        s = write_chrome_trace(cfg.events, out, coarse=coarse, batches=cfg.batches, kineto=kineto,
                               run_name=cfg.name)
    merged = f"; merged into {', '.join(s.merged)} ({s.kineto_events} events)" if s.merged else ""
    marked = ", ".join(f"{n} {what}" for n, what in ((s.exhausted, "exhausted-fetch markers"),
                                                      (s.failed, "failed-fetch slices")) if n)
    marked = f" (of which {marked})" if marked else ""
    click.echo(f"wrote {out}: {s.slices} slices, {s.instants} instants{marked}, {s.flows} batch flows, "
               f"{s.counters} counter samples in {s.processes} processes{merged}. Open it in https://ui.perfetto.dev")
