"""A few independent summaries of one scanned run computed at once, in threads of this process.

The verdict's numbers (:mod:`lotus.analysis.diagnosis`) are separate passes over the same compact table
(:mod:`lotus.analysis.compact`): the wait summary, the loop spans, the workers' utilisation, the first
batches' waits. Their time is numpy's reductions, sorts and copies over the table's columns, which release
the interpreter lock, so two threads overlap them: on a 2-CPU VM (100M events, one rank; issue 26) the
verdict's summaries took 0.22 s one after the other and 0.13-0.15 s in two threads. Each pass only reads
the table (its views are new objects; the spilled columns' pages it drops are read again from their files),
so the results are the very values of the serial calls. With one CPU, or a DataFrame, nothing is overlapped.
"""

from __future__ import annotations

from collections.abc import Callable

from lotus._cpus import count as cpus

THREADS = 2  # measured with two on the 2-CPU VM; the passes are five, the longest ~40% of them: more gain little


def at_once(calls: dict[str, Callable[[], object]], *, threads: int | None = None) -> dict[str, object]:
    """``{name: call()}``, the calls run in up to ``threads`` (:data:`THREADS`, at most the CPUs this process
    may use) threads, in the order given (the longest first keeps them balanced); one thread: in turn, here.
    An exception of a call is raised here, after the others have finished."""
    n = min(threads or THREADS, cpus(), len(calls))
    if n <= 1:
        return {name: call() for name, call in calls.items()}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(n, thread_name_prefix="lotus-summary") as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
    return {name: f.result() for name, f in futures.items()}


__all__ = ["THREADS", "at_once", "cpus"]
