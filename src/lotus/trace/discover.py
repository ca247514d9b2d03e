"""Finding runs in a directory: lotus traces, original LotusTrace logs and torch.profiler traces.

A *run* (a "config" in the analysis) is a directory that directly holds trace files. A directory of
runs (``b512_gpu4/``, ``b1024_gpu4/``...) is searched recursively and its runs are natural-sorted.

A *job of several nodes*: each node wrote its ranks' files into a directory of its own (``job/node0/``,
``job/node1/``... on a shared file system, or gathered there). Sibling directories whose lotus files are
all of one distributed run (the same world size, above 1, and no rank in two of them), in a directory
holding no trace file itself, are one run named after that directory (:func:`find_runs`' ``nodes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lotus.errors import InputError, NoTraceError
from lotus.trace.original import ORIGINAL_NAME
from lotus.trace.parts import is_trace_name

KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


class FileList(list):
    """The files read of a run, as kept in a DataFrame's ``attrs["files"]``. pandas deep-copies ``attrs`` on
    every operation: for a run of many files (non-persistent workers restart every epoch; rotated parts) that
    copy cost more than the operations (8 workers x 50 epochs, 401 files: `lotus report --no-figures` 3.4 s,
    0.6 s without it; `analyze verdict` 1.45 s, 0.16 s). The list is never changed once read, so a copy of it
    is the list itself."""

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self


@dataclass
class Run:
    """The trace files of one run."""

    name: str
    path: Path
    native: list[Path] = field(default_factory=list)  # *.lotustrace
    original: list[Path] = field(default_factory=list)  # <prefix>_{main,worker}_pid_<pid>
    kineto: list[Path] = field(default_factory=list)  # torch.profiler Chrome traces
    # some ranks' files of a larger run, read apart (lotus.analysis.rankmap): that run's clock and loader offsets
    # (lotus.trace.events.readable_native), so that their times and loader ids are the ones the whole run has
    whole: tuple | None = None

    @property
    def has_trace(self) -> bool:
        return bool(self.native or self.original)


def _classify(run: Run, p: Path) -> None:
    name = p.name
    if is_trace_name(name):  # parts too, compressed or not (lotus.trace.parts)
        run.native.append(p)
    elif ORIGINAL_NAME.match(name):
        run.original.append(p)
    elif name.endswith(KINETO_SUFFIXES):
        run.kineto.append(p)


def scan_run(path: str | os.PathLike, name: str | None = None) -> Run:
    """The trace files directly inside ``path`` (a directory) or ``path`` itself (a file)."""
    p = Path(path)
    if p.is_file():
        run = Run(name or p.parent.name or str(p.parent), p.parent)
        _classify(run, p)
        return run
    run = Run(name or p.name or str(p), p)
    with os.scandir(p) as it:
        for entry in it:
            if entry.is_file():
                _classify(run, Path(entry.path))
    run.native.sort()
    run.original.sort()
    run.kineto.sort()
    return run


def _natural_key(text: str):
    from natsort import natsort_keygen

    return natsort_keygen(key=lambda s: s.lower())(text)


def find_runs(path: str | os.PathLike, *, nodes: bool = True) -> list[Run]:
    """All runs under ``path``, natural-sorted by their path relative to ``path``; ``nodes``: the node
    directories of one job are one run (module doc).

    Raises :class:`InputError` when ``path`` does not exist and :class:`NoTraceError` when it holds
    no trace file at all.
    """
    root = Path(path)
    if not root.exists():
        raise InputError("no such file or directory", root)
    if root.is_file():
        run = scan_run(root)
        if not run.has_trace:
            raise NoTraceError("not a lotus trace file nor an original LotusTrace log", root)
        return [run]
    runs: list[Run] = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".lotus-compact"))  # lotus compact's
        rel = os.path.relpath(dirpath, root)
        run = scan_run(dirpath, name=root.resolve().name if rel == "." else rel.replace(os.sep, "/"))
        if run.has_trace:
            runs.append(run)
    if not runs:
        raise NoTraceError(
            "no trace files here or below (expected *.lotustrace or <prefix>_{main,worker}_pid_<pid>)", root
        )
    runs.sort(key=lambda r: _natural_key(r.name))
    return _join_nodes(runs, root) if nodes else runs


def _join_nodes(runs: list[Run], root: Path) -> list[Run]:
    """Sibling runs that are the node directories of one job as one run (module doc)."""
    by_parent: dict[Path, list[Run]] = {}
    for r in runs:
        if r.path != root:
            by_parent.setdefault(r.path.parent, []).append(r)
    out = list(runs)
    for parent, kids in by_parent.items():
        if len(kids) < 2 or any(r.path == parent for r in runs) or not _one_job(kids):
            continue
        rel = os.path.relpath(parent, root)
        job = Run(root.resolve().name if rel == "." else rel.replace(os.sep, "/"), parent)
        for r in kids:
            job.native += r.native
            job.kineto += r.kineto
            out.remove(r)
        out.append(job)
    out.sort(key=lambda r: _natural_key(r.name))
    return out


def _one_job(kids: list[Run]) -> bool:
    from lotus.trace.native import read_header

    world, seen = None, set()
    for r in kids:
        if r.original or not r.native:
            return False
        ranks = set()
        for p in r.native:
            try:
                h = read_header(p)[0]
            except (InputError, OSError):
                continue
            w = int(h.get("world_size") or 1)
            if w <= 1 or world not in (None, w):
                return False
            world = w
            ranks.add(int(h.get("rank") or 0))
        if ranks & seen:
            return False
        seen |= ranks
    return world is not None


def find_run(path: str | os.PathLike, *, nodes: bool = True) -> Run:
    """Exactly one run: ``path`` itself if it holds trace files, else its only run below (``nodes``: see
    :func:`find_runs`)."""
    root = Path(path)
    if root.is_dir():
        run = scan_run(root)
        if run.has_trace:
            return run
    runs = find_runs(root, nodes=nodes)
    if len(runs) > 1:
        names = ", ".join(r.name for r in runs[:5])
        raise InputError(f"holds {len(runs)} runs ({names}...); name one of them", root)
    return runs[0]
