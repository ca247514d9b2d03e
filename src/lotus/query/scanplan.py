"""How a scan is cut into parts (:func:`plan`) and how one part is scanned (:func:`scan_task`): shared by
the processes of this machine (:mod:`lotus.query.parallel`) and a Dask cluster (:mod:`lotus.query.cluster`).
"""

from __future__ import annotations

from pathlib import Path

from lotus.query.scanfiles import ScanPart, scan_files

TASKS_PER_JOB = 5  # parts per process: the last ones to finish are shorter (balance)
PART_BYTES = 1 << 30  # ... and at most about this many bytes of files a part
IN_MEMORY_PART_BYTES = 2 << 30  # a part of fewer bytes keeps its per-batch columns in memory (~1% of them)


def _size(p: Path) -> int:
    try:
        return p.stat().st_size * (5 if p.name.endswith(".zst") else 1)
    except OSError:
        return 0


def plan(paths: list[Path], n: int) -> list[list[Path]]:
    """``paths`` cut into at most ``n`` runs of consecutive files of about equal bytes, never between two
    parts of one process (a process's parts continue each other's per-sample spans)."""
    from lotus.trace.parts import part_of

    if n <= 1 or len(paths) <= 1:
        return [list(paths)] if paths else []
    last = {part_of(p)[0]: i for i, p in enumerate(paths)}
    reach, ok = -1, []  # ok[i]: a cut before paths[i] splits no process
    for i, p in enumerate(paths):
        ok.append(i > reach)
        reach = max(reach, last[part_of(p)[0]])
    sizes = [_size(p) for p in paths]
    target = sum(sizes) / n
    out: list[list[Path]] = [[]]
    done = 0
    for i, p in enumerate(paths):
        if out[-1] and ok[i] and len(out) < n and done >= target * len(out):
            out.append([])
        out[-1].append(p)
        done += sizes[i]
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
