"""Where the parts of a scan run: in this process, on every core of this machine, or on a cluster.

The scan (:mod:`lotus.query.scan`) splits a run's files, in their order, into runs of consecutive files
(:func:`plan`: every part of a process in one of them; runs of decreasing size, so that the processes
finish close together) and scans each with
:func:`lotus.query.scanfiles.scan_files`; :func:`lotus.query.scanmerge.merge_parts` merges the parts in
that order into the bytes one pass would have made. How many processes (:func:`jobs`):

* ``$LOTUS_JOBS`` (``lotus ... --jobs N``): N processes (1: the serial path, in this process, no merge;
  ``0`` or ``auto``: every core this process may run on);
* otherwise every core for a run of at least :data:`PARALLEL_MIN_BYTES` of trace files, else one.

Processes are forked (``multiprocessing``); each part comes back in order, its arrays through a
memory-backed file rather than the pool's pipe (:mod:`lotus.query.handoff`). ``$LOTUS_CLUSTER``
(``--cluster ADDRESS``) sends the same parts to a running Dask cluster instead
(:mod:`lotus.query.cluster`): its workers read the files at the same paths (shared storage).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from lotus._cpus import count as cores
from lotus.errors import LotusError
from lotus.query.handoff import handoff_dir, receive, send
from lotus.query.scanfiles import ScanContext, ScanPart, scan_files
from lotus.query.scanplan import PART_BYTES, TASKS_PER_JOB, _size, plan, scan_task

_log = logging.getLogger("lotus.trace")
PARALLEL_MIN_BYTES = 64 << 20  # smaller runs: one process (starting others costs more than it saves)


_OVERRIDE: dict = {}  # what settings() set (the CLI's --jobs and --cluster), before the environment


@contextlib.contextmanager
def settings(jobs: int | None = None, cluster: str | None = None):
    """``$LOTUS_JOBS`` and ``$LOTUS_CLUSTER`` for the time of a ``with`` block (``lotus ... --jobs N --cluster
    ADDRESS``); None leaves one as it is. A cluster is checked here, once: unreachable is a :class:`ClusterError`."""
    before = dict(_OVERRIDE)
    if jobs is not None:
        _OVERRIDE["jobs"] = str(jobs)
    if cluster is not None:
        from lotus.query.cluster import check

        _OVERRIDE["cluster"] = check(cluster)
    try:
        yield
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(before)
        if cluster is not None:
            from lotus.query.cluster import close

            close()


@contextlib.contextmanager
def serial():
    """This process alone for the time of a ``with`` block, whatever ``$LOTUS_JOBS`` and ``$LOTUS_CLUSTER`` say: a
    task of :func:`map_tasks` that scans files of its own (it runs on one of the processes already)."""
    before = dict(_OVERRIDE)
    _OVERRIDE.update(jobs="1", cluster="")
    try:
        yield
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(before)


def _setting(key: str) -> str:
    if key in _OVERRIDE:
        return _OVERRIDE[key]
    return os.environ.get(f"LOTUS_{key.upper()}", "").strip()


def cluster_address() -> str:
    """The cluster the scan's parts go to (``$LOTUS_CLUSTER``, ``--cluster``); "" for this machine."""
    return _setting("cluster")


def jobs(total_bytes: int) -> int:
    """How many processes scan a run of ``total_bytes`` (module doc)."""
    text = _setting("jobs")
    if not text:
        return cores() if total_bytes >= PARALLEL_MIN_BYTES else 1
    if text.lower() in ("0", "auto"):
        return cores()
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 1:
        raise LotusError(f"LOTUS_JOBS (--jobs) must be a number of processes >= 1, or 0/auto for every core; "
                         f"not {text!r}")
    return n


def scan_parts(paths: list[Path], ctx: ScanContext) -> Iterator[ScanPart]:
    """The parts of a scan of ``paths``, in file order (module doc)."""
    address = _setting("cluster")
    if address:
        from lotus.query.cluster import cluster_parts

        if ctx.op_reduce == "values":  # a cluster's workers write their temporary files on their own disks
            ctx = replace(ctx, op_reduce="batches")

        yield from cluster_parts(address, paths, ctx)
        return
    total = sum(_size(p) for p in paths)
    n = jobs(total)
    import multiprocessing

    if multiprocessing.current_process().daemon:  # a pool's worker may start no processes of its own
        n = 1
    tasks = plan(paths, max(n * TASKS_PER_JOB, total // PART_BYTES), jobs=n) if n > 1 else []
    if len(tasks) <= 1:
        yield scan_files(paths, ctx)
        return

    ctx = replace(ctx, replay=True)
    _log.debug("scanning %d files in %d parts on %d processes", len(paths), len(tasks), n)
    yield from _on_processes(scan_task, [(t, ctx) for t in tasks], min(n, len(tasks)), meanwhile=_import_pandas)


def _import_pandas() -> None:
    import pandas  # noqa: F401 - while the workers scan: the events DataFrame is made next


def task_count(total_bytes: int) -> int:
    """How many tasks a run of ``total_bytes`` of trace files is cut into where the scan's parts run
    (:data:`TASKS_PER_JOB` a process or a cluster's worker thread, and parts of at most about
    :data:`PART_BYTES`): what :func:`map_tasks`' callers aim at."""
    address = _setting("cluster")
    if address:
        from lotus.query.cluster import _threads, client

        workers = max(_threads(client(address)), 1)
    else:
        workers = jobs(total_bytes)
    return max(workers * TASKS_PER_JOB, total_bytes // PART_BYTES, 1)


def map_tasks(fn, tasks: list, sizes: list[int]) -> Iterator:
    """``fn(task)`` of each of ``tasks`` (``sizes``: the bytes of trace files each reads), in their order, where the
    scan's parts run: on the cluster of ``$LOTUS_CLUSTER``, else on as many processes of this machine as
    :func:`jobs` gives for their bytes (forked; the results handed back as the parts are, :mod:`lotus.query.handoff`),
    else here one after the other. ``fn``: a function of a module (the cluster's workers import it), whose task runs
    serially (:func:`serial`)."""
    address = _setting("cluster")
    if address:
        from lotus.query.cluster import cluster_map

        yield from cluster_map(address, fn, tasks)
        return
    import multiprocessing

    n = min(jobs(sum(sizes)), len(tasks))
    if n <= 1 or multiprocessing.current_process().daemon:
        for t in tasks:
            yield fn(t)
        return
    _log.debug("%d tasks on %d processes", len(tasks), n)
    yield from _on_processes(fn, tasks, n)


def _on_processes(fn, tasks: list, n: int, meanwhile=None) -> Iterator:
    """``fn(task)`` of each task on a pool of ``n`` forked processes, in order, each result handed back through a
    file (:mod:`lotus.query.handoff`); ``meanwhile()`` runs here once the tasks are handed out."""
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    with handoff_dir() as where, multiprocessing.get_context(method).Pool(n) as pool:
        results = pool.imap(_call_and_send, [(fn, t, where) for t in tasks])
        if meanwhile is not None:
            meanwhile()
        for got in results:
            yield receive(got)


def _call_and_send(args):
    """A task run in a pool's process, its result handed back through a file under ``where``."""
    fn, task, where = args
    return send(fn(task), where)
