"""Issue 25: the cache what-if of a scanned run reads only its sample and load events of a known index
(lotus.model.scanaccess), not every event: the same access sequence as from the whole events DataFrame."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.model import load_run
from lotus.model.cache import access_epochs
from lotus.model.detail import detail_events
from lotus.model.scanaccess import access_events
from tests.model.test_scan_fit import _runs

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("kind", ["synth", "outcome", "real", "pooled", "two-loaders"])
def test_scanned_access_sequence_same(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    for r in _runs(kind, tmp_path):
        run = load_run(r)
        narrow = access_events(run)
        whole = detail_events(run)  # every event, read again in memory
        assert len(narrow) <= len(whole)
        for loader in (None, 0, 1):
            got, want = access_epochs(narrow, loader=loader), access_epochs(whole, loader=loader)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and np.array_equal(g, w)


def test_memory_run_access_events_are_its_events(tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    run = load_run(_runs("synth", tmp_path)[0])
    assert access_events(run) is run.events
