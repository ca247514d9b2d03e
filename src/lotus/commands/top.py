"""``lotus top [RUN_DIR]``: live view of a running job from the trace files it is writing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click


def _snapshot(tailer, status, target: Path, window: float) -> dict:
    from lotus.live import snapshot

    snap = snapshot(tailer.state, tailer.state.now_ns(status.live), window)
    snap.update(run_dir=str(target), live=status.live, job=status.as_dict(), wall_ns=time.time_ns())
    return snap


def _emit_once(snap: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(snap))
        return
    from rich.console import Console

    from lotus.live.render import render

    Console().print(render(snap))


def _follow(root: Path, target: Path, interval: float, window: float, emit) -> tuple[dict, str]:
    """Refresh until the job ends; returns the last snapshot and the final line."""
    from lotus.live import Tailer, job_status, resolve_run_dir

    tailer = Tailer(target)
    tailer.poll()
    status = job_status(target, root=root)
    while True:
        snap = _snapshot(tailer, status, target, window)
        emit(snap)
        if not status.live:
            return snap, f"lotus top: job ended ({status.reason})"
        time.sleep(interval)
        tailer.poll()
        status = job_status(target, root=root)
        if not status.live:
            newer = resolve_run_dir(root)  # a directory of runs: follow the next one when it starts
            if newer != target and job_status(newer, root=root).live:
                target, tailer = newer, Tailer(newer)
                status = job_status(target, root=root)
            tailer.poll()  # the last records


@click.command("top")
@click.argument("run_dir", required=False, type=click.Path(path_type=Path))
@click.option("--once", is_flag=True, help="Print one snapshot and exit (also when no job is running).")
@click.option("--json", "as_json", is_flag=True,
              help="JSON instead of the table: one object with --once, else one line per refresh.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05),
              help="Seconds between refreshes.")
@click.option("--window", default=10.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds over which rates and shares are computed.")
def top(run_dir: Path | None, once: bool, as_json: bool, interval: float, window: float) -> None:
    """Live view of a running job: per DataLoader, samples/s, the loop's wait share, per-worker busy
    share and batches in flight, queue depth, slowest op, GPU idle from data. Exits when the job ends.

    RUN_DIR: a trace directory, or a directory of them (the newest is followed). Default: the newest
    directory under ./lotus-runs/, else the current directory. See docs/top.md.
    """
    from lotus.live import Tailer, default_root, job_status, resolve_run_dir

    root = run_dir if run_dir is not None else default_root()
    target = resolve_run_dir(root)
    status = job_status(target, root=root)
    if once:
        tailer = Tailer(target)
        tailer.poll()
        _emit_once(_snapshot(tailer, status, target, window), as_json)
        if not status.live:
            click.echo(f"lotus top: no live job in {target} ({status.reason}); "
                       "the snapshot is the last one the files give", err=True)
        return
    if not status.live:  # on stderr with --json: stdout stays JSON only
        click.echo(f"lotus top: no live job in {target} ({status.reason})", err=as_json)
        return
    try:
        if as_json:
            _, final = _follow(root, target, interval, window, lambda s: click.echo(json.dumps(s)))
            click.echo(final, err=True)
            return
        from rich.console import Console
        from rich.live import Live

        from lotus.live.render import render

        console = Console()
        with Live(console=console, auto_refresh=False, transient=False) as live:
            _, final = _follow(root, target, interval, window, lambda s: live.update(render(s), refresh=True))
        if not console.is_terminal:
            console.line()  # rich ends a live display with a newline only on terminals
        console.print(final, highlight=False, markup=False)
    except KeyboardInterrupt:  # the usual way to leave a live view: not an error
        return
