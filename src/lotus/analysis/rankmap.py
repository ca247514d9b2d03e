"""``lotus analyze ranks`` of a large run, rank by rank where the scan runs (issue 26).

Every figure of :func:`lotus.analysis.ranks.rank_report` but the step table and the straggler is a rank's own,
and the step table needs only a few columns of each rank's steps. So a run of several ranks that is scanned
on several processes or on a cluster (:func:`lotus.query.parallel.map_tasks`) is read a few whole ranks at a
time (as many tasks as the scan would make parts: :func:`lotus.query.parallel.task_count`): each task scans its
ranks' files (all their processes: main and workers, every part) as a run of its own, with the
whole run's clock and loader offsets (:attr:`lotus.trace.discover.Run.whole`: the same times and loader ids),
and reduces them to those ranks' :class:`lotus.analysis.ranks.RankParts` (their rates, the sums of their
figures, their op totals, fetch counts and step rows) and their files' headers. Only those come back: no per-batch
column, and none of the table the client would otherwise build, merge and read (~75 bytes a batch received,
then the summaries, all on the one client). The client merges the parts in rank order and makes the report
(:func:`lotus.analysis.ranks.report_of_parts`): the same JSON, byte for byte, as the whole run's scan
(tests/analysis/test_rankmap.py).

Used where it pays and changes nothing else: a lotus trace (no original logs) of two ranks or more whose every
file names its rank, large enough to be scanned (:data:`lotus.analysis.runs.SCAN_THRESHOLD_BYTES`) and to be
read on more than one process (``$LOTUS_JOBS``, or ``$LOTUS_CLUSTER``). Otherwise the run is scanned whole, as
before. Warnings a task logs (a truncated file, a duplicate batch) are logged here, once each, in task order;
the ranks missing from the run are named here from every file's header. The ``LOTUS_*`` settings of this
process (the run-to-run spread, the engine's options) travel with each task, so that a cluster's workers,
whose environment may differ, compute what this process would.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_log = logging.getLogger("lotus.analysis")
_RANK_IN_NAME = re.compile(r"^lotus-r(\d+)-")
_NOT_SENT = ("LOTUS_JOBS", "LOTUS_CLUSTER")  # the task runs serially (lotus.query.parallel.serial)


@dataclass
class RankTask:
    """One task: the files of some ranks (consecutive, whole) of the run ``name`` at ``path``, the whole run's
    offsets, this process's ``LOTUS_*`` settings."""

    name: str
    path: Path
    files: list[Path]
    whole: tuple
    env: dict = field(default_factory=dict)


def ranks_of_files(paths: list[Path]) -> dict[int, list[Path]] | None:
    """``{rank: its files}`` (in the run's order) from the files' headers (else from their names,
    ``lotus-r<rank>-...``); None where a file says no rank (the run is then read whole)."""
    from lotus.errors import InputError
    from lotus.trace.native import read_header

    out: dict[int, list[Path]] = {}
    for p in paths:
        try:
            rank = int(read_header(p)[0].get("rank", 0))
        except (InputError, OSError, ValueError, TypeError):
            m = _RANK_IN_NAME.match(p.name)
            if m is None:
                return None
            rank = int(m.group(1))
        out.setdefault(rank, []).append(p)
    return out


def tasks_of(run) -> list[RankTask] | None:
    """The tasks of ``run`` (a :class:`lotus.trace.discover.Run`) a rank each, or None where it is read whole
    (module doc)."""
    from lotus.analysis.runs import _engine_for
    from lotus.query import cluster_address, jobs, task_count, trace_bytes

    if run.original or not run.native or _engine_for(run, "auto") != "scan":
        return None
    by_rank = ranks_of_files(run.native)
    if by_rank is None or len(by_rank) < 2:
        return None
    if not cluster_address() and jobs(sum(trace_bytes(p) for p in run.native)) <= 1:
        return None
    from lotus.trace.events import readable_native

    with _captured():  # an unreadable file: its rank's task says so
        _good, offsets, per_process = readable_native(run)
    env = {k: v for k, v in os.environ.items() if k.startswith("LOTUS_") and k not in _NOT_SENT}
    groups = _groups([files for _, files in sorted(by_rank.items())], task_count(sum(map(trace_bytes, run.native))))
    return [RankTask(run.name, run.path, [p for files in g for p in files], (offsets, per_process), env)
            for g in groups]


def _groups(ranks: list[list[Path]], n: int) -> list[list[list[Path]]]:
    """``ranks`` (each rank's files, in rank order) cut into at most ``n`` runs of consecutive ranks of about equal
    bytes: a task's fixed cost (a scan's start, its tables, pandas' calls: ~0.1 s) paid once for several ranks."""
    from lotus.query import trace_bytes

    sizes = [sum(map(trace_bytes, files)) for files in ranks]
    target = sum(sizes) / max(n, 1)
    out: list[list[list[Path]]] = [[]]
    done = 0
    for files, size in zip(ranks, sizes, strict=True):
        if out[-1] and len(out) < n and done >= target * len(out):
            out.append([])
        out[-1].append(files)
        done += size
    return out


def rank_task(task: RankTask) -> tuple:
    """(:class:`lotus.analysis.ranks.RankParts`, the files' headers, the warnings logged: (level, message)) of one
    task, in a process of :func:`lotus.query.parallel.map_tasks` (or a cluster's worker)."""
    from lotus.analysis.ranks import RANK_BATCH_COLUMNS, RankParts, rank_parts_of
    from lotus.analysis.runs import scanned_config
    from lotus.errors import InputError
    from lotus.query import serial
    from lotus.trace.discover import Run
    from lotus.trace.native import header_cache

    run = Run(task.name, task.path, native=list(task.files), whole=task.whole)
    with _settings(task.env), serial(), _captured() as said, header_cache():
        try:
            cfg = scanned_config(run)
        except InputError as exc:  # none of these ranks' files reads (each said why): the others are analysed
            said.append((logging.WARNING, f"{exc}; ranks of these files skipped"))
            return RankParts(), [], said
        parts = rank_parts_of(cfg.events, cfg.batches_by_rank(RANK_BATCH_COLUMNS), cfg.loaders)
        files = cfg.files
    return parts, files, said


def rank_report_of_run(run) -> dict:
    """:func:`lotus.analysis.ranks.rank_report` of ``run`` (a :class:`lotus.trace.discover.Run`): rank by rank
    where :func:`tasks_of` gives tasks (module doc), else of the whole run's config."""
    from lotus.analysis.ranks import RANK_BATCH_COLUMNS, RankParts, rank_report, report_of_parts

    tasks = tasks_of(run)
    if tasks is None:
        from lotus.analysis.runs import _config_of

        cfg = _config_of(run, "auto")
        return rank_report(cfg.events, cfg.batches_by_rank(RANK_BATCH_COLUMNS), cfg.loaders, cfg.files)
    from lotus.errors import InputError
    from lotus.query import map_tasks, spill, trace_bytes
    from lotus.trace.events import warn_main_and_ranks

    parts, files, seen = RankParts(), [], set()
    for got, mine, said in map_tasks(rank_task, tasks, [sum(trace_bytes(p) for p in t.files) for t in tasks]):
        got.steps = [spill.copies_of(s) for s in got.steps]  # on disk until the step table reads them
        parts.merge(got)
        files.extend(mine)
        for level, text in said:
            if text not in seen:
                seen.add(text)
                _log.log(level, "%s", text)
    if not files:
        raise InputError("no readable trace file", run.path)
    warn_main_and_ranks(files, run.path)
    return report_of_parts(parts, files)


@contextlib.contextmanager
def _settings(env: dict):
    """This process's ``LOTUS_*`` settings for a while: ``env``'s (the client's), the others unset."""
    before = {k: v for k, v in os.environ.items() if k.startswith("LOTUS_") and k not in _NOT_SENT}
    for k in before:
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(before)


class _Said(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))


@contextlib.contextmanager
def _captured():
    """The warnings lotus logs for a while, kept (``[(level, message)]``) instead of shown: the client shows them."""
    root = logging.getLogger("lotus")
    handler = _Said()
    handlers, propagate = root.handlers[:], root.propagate
    root.handlers[:] = [handler]
    root.propagate = False
    try:
        yield handler.records
    finally:
        root.handlers[:] = handlers
        root.propagate = propagate


__all__ = ["RankTask", "rank_report_of_run", "rank_task", "ranks_of_files", "tasks_of"]
