"""The scan's parts on a running Dask cluster (``--cluster ADDRESS`` / ``$LOTUS_CLUSTER``).

The same parts as on this machine's cores (:func:`lotus.query.parallel.plan`: runs of consecutive files,
:func:`lotus.query.scanfiles.scan_files` on each) are submitted to the cluster's scheduler, about
:data:`lotus.query.parallel.TASKS_PER_JOB` per worker thread, and their results merged here in file order
(:mod:`lotus.query.scanmerge`): the same bytes out as the local engine. The workers read the trace files
at the paths this process sees (shared storage: NFS, Lustre, a bind mount) and must have lotus installed.

A worker that dies mid-part: the scheduler runs the part again on another worker (Dask's own retry; a part
whose workers died :data:`ALLOWED_FAILURES` times, or a cluster left without any worker for
``$LOTUS_CLUSTER_TIMEOUT`` seconds, is one :class:`lotus.errors.ClusterError`). An address that cannot be
reached within that timeout (default :data:`TIMEOUT_S`) is a :class:`ClusterError` too (exit code 2).
``distributed`` is imported only here, only when a cluster is named (``pip install 'lotus-trace[cluster]'``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from lotus.errors import ClusterError, InputError
from lotus.query.scanfiles import ScanContext, ScanPart
from lotus.query.scanplan import PART_BYTES, TASKS_PER_JOB, _size, plan, scan_task

_log = logging.getLogger("lotus.trace")
TIMEOUT_S = 10.0
ALLOWED_FAILURES = 3  # Dask's default: a part's worker may die this many times before it fails
_CLIENTS: dict = {}  # address -> distributed.Client, for the life of this process


def _timeout() -> float:
    try:
        return float(os.environ.get("LOTUS_CLUSTER_TIMEOUT", TIMEOUT_S))
    except ValueError:
        return TIMEOUT_S


def _address(text: str) -> str:
    text = text.strip()
    return text if "://" in text else f"tcp://{text}"


def client(address: str):
    """A client of the scheduler at ``address`` (``tcp://`` by default), made once; :class:`ClusterError`
    when it cannot be reached."""
    address = _address(address)
    if address in _CLIENTS:
        return _CLIENTS[address]
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError("--cluster needs Dask distributed: pip install 'lotus-trace[cluster]'") from None
    try:
        c = Client(address, timeout=_timeout(), set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ClusterError(f"cannot reach a Dask scheduler at {address} within {_timeout():g} s ({why})") from None
    _CLIENTS[address] = c
    return c


def check(address: str) -> str:
    """``address`` normalised, once a client reached it (:func:`client`)."""
    client(address)
    return _address(address)


def _threads(c) -> int:
    workers = c.scheduler_info().get("workers", {})
    return sum(int(w.get("nthreads", 1)) for w in workers.values())


def scan_remote(paths: list[Path], ctx: ScanContext) -> ScanPart:
    """One part, on a worker (:func:`lotus.query.scanplan.scan_task`, through :func:`on_worker`)."""
    return on_worker((paths, ctx), scan_task, paths[0])


def on_worker(task, fn, path=None):
    """``fn(task)`` on a worker; a file it cannot read is an :class:`InputError` naming the worker's host (``path``:
    the file named when the error names none)."""
    import socket

    try:
        return fn(task)
    except OSError as exc:
        raise InputError(f"cannot read it on worker {socket.gethostname()} ({exc.strerror or exc}); the "
                         "workers must see the trace files at the same paths", exc.filename or path or "?") from None


def cluster_parts(address: str, paths: list[Path], ctx: ScanContext) -> Iterator[ScanPart]:
    """The parts of a scan of ``paths`` computed on the cluster at ``address``, in file order."""
    c = client(address)
    threads = _threads(c)
    total = sum(_size(p) for p in paths)
    tasks = plan(paths, max(max(threads, 1) * TASKS_PER_JOB, total // PART_BYTES))
    ctx = replace(ctx, replay=True)
    _log.debug("scanning %d files in %d parts on %s (%d worker threads)", len(paths), len(tasks), address, threads)
    yield from _results(c, c.map(scan_remote, tasks, ctx=ctx, pure=False, retries=0), address)


def cluster_map(address: str, fn, tasks: list) -> Iterator:
    """``fn(task)`` of each of ``tasks`` on the cluster at ``address`` (:func:`on_worker`), in their order
    (:func:`lotus.query.parallel.map_tasks`); failures as the scan's parts' (:func:`_result`)."""
    c = client(address)
    _log.debug("%d tasks on %s", len(tasks), address)
    yield from _results(c, c.map(on_worker, tasks, fn=fn, pure=False, retries=0), address)


def _results(c, futures, address: str) -> Iterator:
    try:
        for f in futures:
            yield _result(c, f, address)
    finally:
        c.cancel(futures)


def _result(c, future, address: str):
    """The part (or result) of ``future``; one :class:`ClusterError` when its workers keep dying or none is left."""
    from distributed import TimeoutError as DaskTimeout

    alone = None  # since when the cluster has had no worker
    while True:
        try:
            return future.result(timeout=1.0)
        except (DaskTimeout, TimeoutError):
            pass
        except InputError:
            raise
        except Exception as exc:  # KilledWorker, a lost scheduler...
            if type(exc).__name__ == "KilledWorker":
                raise ClusterError(f"the workers of {address} died {ALLOWED_FAILURES + 1} times on the same part "
                                   "of the scan (out of memory?); nothing was reported") from None
            raise ClusterError(f"the cluster at {address} failed: {type(exc).__name__}: {exc}") from None
        try:
            workers = len(c.scheduler_info().get("workers", {}))
        except Exception:  # the scheduler itself is gone
            workers = 0
        now = time.monotonic()
        alone = None if workers else (alone or now)
        if alone is not None and now - alone > _timeout():
            raise ClusterError(f"the cluster at {address} has had no worker for {_timeout():g} s; nothing was reported")


def close() -> None:
    """Close the clients made (the end of a command)."""
    while _CLIENTS:
        _, c = _CLIENTS.popitem()
        try:
            c.close(timeout=5)
        except Exception:  # closing a client of a gone cluster
            pass
