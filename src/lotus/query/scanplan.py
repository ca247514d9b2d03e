"""How a scan is cut into parts (:func:`plan`) and how one part is scanned (:func:`scan_task`): shared by
the processes of this machine (:mod:`lotus.query.parallel`) and a Dask cluster (:mod:`lotus.query.cluster`).
"""

from __future__ import annotations

from pathlib import Path

from lotus.query.scanfiles import ScanPart, scan_files

TASKS_PER_JOB = 5  # parts per process: the last ones to finish are shorter (balance)
PART_BYTES = 1 << 30  # ... and at most about this many bytes of files a part
TAPER = 2  # a run of a tapered plan: the bytes left over TAPER x the processes (plan)
IN_MEMORY_PART_BYTES = 2 << 30  # a part of fewer bytes keeps its per-batch columns in memory (~1% of them)


def trace_bytes(p: Path) -> int:
    """The bytes of a trace file as the scan's plans count them: a compressed one at 5 times its size, one that
    cannot be read 0."""
    try:
        return p.stat().st_size * (5 if p.name.endswith(".zst") else 1)
    except OSError:
        return 0


_size = trace_bytes


def plan(paths: list[Path], n: int, jobs: int = 0) -> list[list[Path]]:
    """``paths`` cut into at most ``n`` runs of consecutive files of about equal bytes, never between two
    parts of one process (a process's parts continue each other's per-sample spans). ``jobs`` (the processes
    that take the runs in turn, as each finishes one): runs of decreasing size instead (``n`` unused), each
    about the bytes left over :data:`TAPER` times ``jobs`` (at most :data:`PART_BYTES`, at least a file): the
    processes then finish within a small run of each other, not a whole one (:func:`_tapered`; measured on
    the 100M-event run, 41 files, 2 processes: 0.67 s between the two processes' ends with 10 equal runs,
    0.09 s with these)."""
    from lotus.trace.parts import part_of

    if n <= 1 or len(paths) <= 1:
        return [list(paths)] if paths else []
    last = {part_of(p)[0]: i for i, p in enumerate(paths)}
    reach, ok = -1, []  # ok[i]: a cut before paths[i] splits no process
    for i, p in enumerate(paths):
        ok.append(i > reach)
        reach = max(reach, last[part_of(p)[0]])
    sizes = [_size(p) for p in paths]
    if jobs > 1:
        return _tapered(paths, sizes, ok, jobs)
    target = sum(sizes) / n
    out: list[list[Path]] = [[]]
    done = 0
    for i, p in enumerate(paths):
        if out[-1] and ok[i] and len(out) < n and done >= target * len(out):
            out.append([])
        out[-1].append(p)
        done += sizes[i]
    return out


def _tapered(paths: list[Path], sizes: list[int], ok: list[bool], jobs: int) -> list[list[Path]]:
    """Guided cuts (:func:`plan`): a run ends once it holds (bytes left at its start) / (TAPER x jobs)."""
    out: list[list[Path]] = [[]]
    left = sum(sizes)
    goal, held = min(left / (TAPER * jobs), PART_BYTES), 0
    for i, p in enumerate(paths):
        if out[-1] and ok[i] and held >= goal:
            out.append([])
            goal, held = min(left / (TAPER * jobs), PART_BYTES), 0
        out[-1].append(p)
        held += sizes[i]
        left -= sizes[i]
    return out


def scan_task(args) -> ScanPart:
    """A part, in a worker process: its per-batch columns in memory unless its files are large (they go back
    pickled; mapping, allocating and dropping pages on disk costs more than it saves there)."""
    from lotus.query import spill

    paths, ctx = args
    if sum(_size(p) for p in paths) > IN_MEMORY_PART_BYTES:
        return scan_files(paths, ctx)
    with spill.in_memory():
        return scan_files(paths, ctx)
