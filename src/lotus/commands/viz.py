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
@click.option("--window", metavar="START:END", help="Only the events inside this window, exactly: seconds from the "
              "run's first event (3600:3660, :60, 7200:) or epochs (e3, e2:e4).")
@click.option("--overview", is_flag=True, help="Counters per time bucket instead of events: each worker's busy share "
              "and the loop's wait share (what a day-long run needs; the default for runs over the scan threshold "
              "without --window).")
@click.option("--bucket", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bucket of --overview (default: the run's length / 2000).")
def viz(data_dir: Path, out: Path, coarse: bool, merge: tuple[Path, ...], no_merge: bool, window: str | None,
        overview: bool, bucket: float | None) -> None:
    """Write a Chrome Trace Event JSON of a run for ui.perfetto.dev or chrome://tracing."""
    from lotus.analysis import window as W
    from lotus.analysis.chrome import write_chrome_trace
    from lotus.analysis.runs import load_config

    cfg = load_config(data_dir, engine="auto")
    scanned = "op_engine" in cfg.events.attrs
    if overview or (scanned and window is None):
        t0, t1 = W.run_span(cfg.events)
        size = int(bucket * 1e9) if bucket else max((t1 - t0) // 2000, 1_000_000)
        table = W.overview(cfg.batches_of(W.OVERVIEW_COLUMNS), size)  # a scanned run: these columns only
        with writing(out):
            out.parent.mkdir(parents=True, exist_ok=True)
            n = W.write_overview(table, out, run_name=cfg.name)
        why = "" if overview else " (a large run: --window START:END for its events)"
        click.echo(f"wrote {out}: overview{why}, {n} counter samples over {table['track'].nunique()} tracks, "
                   f"buckets of {size / 1e9:.3g} s. Open it in https://ui.perfetto.dev")
        return
    events, batches = cfg.events, cfg.batches
    if window is not None:
        try:
            t0, t1 = W.parse_window(window, cfg.events)
        except W.WindowError as exc:
            click.echo(f"lotus: error: {exc}", err=True)
            raise click.exceptions.Exit(2) from None
        events, batches = W.window_events(cfg.events, t0, t1), W.window_batches(cfg.batches, t0, t1)
    kineto = list(merge) or ([] if no_merge else cfg.kineto)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        s = write_chrome_trace(events, out, coarse=coarse, batches=batches, kineto=kineto,
                               run_name=cfg.name)
    merged = f"; merged into {', '.join(s.merged)} ({s.kineto_events} events)" if s.merged else ""
    marked = ", ".join(f"{n} {what}" for n, what in ((s.exhausted, "exhausted-fetch markers"),
                                                      (s.failed, "failed-fetch slices")) if n)
    marked = f" (of which {marked})" if marked else ""
    click.echo(f"wrote {out}: {s.slices} slices, {s.instants} instants{marked}, {s.flows} batch flows, "
               f"{s.counters} counter samples in {s.processes} processes{merged}. Open it in https://ui.perfetto.dev")
