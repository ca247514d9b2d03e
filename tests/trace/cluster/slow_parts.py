"""A Dask worker preload for tests/trace/test_cluster.py: each part of a scan waits first for as many
seconds as the file named by $LOTUS_TEST_DELAY_FILE says (none: no wait), so that a test can kill the
worker while it holds a part."""

import os
import time

import lotus.query.cluster as cluster

_scan_remote = getattr(cluster, "_unpatched_scan_remote", cluster.scan_remote)  # the preload may run twice
cluster._unpatched_scan_remote = _scan_remote


def _delay() -> float:
    try:
        with open(os.environ["LOTUS_TEST_DELAY_FILE"]) as f:
            return float(f.read().strip() or 0)
    except (KeyError, OSError, ValueError):
        return 0.0


def slow_scan_remote(paths, ctx):
    time.sleep(_delay())
    return _scan_remote(paths, ctx)


cluster.scan_remote = slow_scan_remote  # the client sends the function by name: the workers call this one
