"""Runs that repeat one configuration: the command launched ``n`` times, one after the other, each a process of
its own with its own trace directory (``<dir>/r1`` .. ``<dir>/rN``), through :func:`lotus.launch.launch`.

Separate runs of a job differ by more than one run's own interval shows (each sets its own pace: on the GPU host
runs of one ResNet-18 setting spread 8-9% where a run's epochs agreed within 2-5%, docs/intervals.md); only
repeats measure it. ``lotus run --repeat N`` makes them and :func:`lotus.analysis.runspread.repeats` reads them
(``lotus analyze throughput -d DIR --repeats``: their mean, the spread, and whether single runs' intervals hold).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lotus.launch.options import LaunchOptions


def launch_repeats(command: list[str], options: LaunchOptions, n: int, *,
                   progress: Callable[[int, object], None] | None = None) -> tuple[Path, list]:
    """``(directory, probes)``: ``command`` run ``n`` times with ``options``, each into ``<directory>/r<k>``
    (``options.trace_dir``, or ``lotus-runs/repeats-<script>-<time>/``). ``progress(k, probe)`` after each run.
    Stops after a run that was interrupted (Ctrl-C); a run that fails does not stop the others."""
    from lotus.launch.options import default_trace_dir, script_name
    from lotus.launch.runner import launch

    if n < 1:
        raise ValueError(f"repeats: n must be >= 1 (got {n})")
    root = Path(options.trace_dir) if options.trace_dir is not None else \
        default_trace_dir([f"repeats-{script_name(command)}"])
    probes = []
    for k in range(1, n + 1):
        probe = launch(list(command), replace(options, trace_dir=root / f"r{k}"))
        probes.append(probe)
        if progress is not None:
            progress(k, probe)
        if probe.stopped == "interrupt":
            break
    return root, probes


def read_repeats(probes: list) -> dict | None:
    """:func:`lotus.analysis.runspread.repeats_of` the launched runs (a run whose trace cannot be read has no
    rate); None with fewer than two rated runs."""
    from lotus.analysis.runspread import repeats_of

    summaries = {}
    for probe in probes:
        try:
            summaries[Path(probe.trace_dir).name] = probe.summary()
        except Exception:  # a damaged trace: no rate (lotus run reports it with the run)
            summaries[Path(probe.trace_dir).name] = {}
    return repeats_of(summaries)


__all__ = ["launch_repeats", "read_repeats"]
