"""Settings forced from outside the script (lotus run --workers / --set)."""

from __future__ import annotations

import json

import pytest
import torch

from lotus.dataloader import DataLoader
from lotus.dataloader import overrides as O
from tests.dataloader import datasets as D


def test_check_values():
    assert O.check("pin_memory", "true") is True and O.check("in_order", "0") is False
    assert O.check("prefetch_factor", "4") == 4
    for key, value in (("batch_size", 4), ("prefetch_factor", 0), ("num_workers", -1), ("pin_memory", "maybe")):
        with pytest.raises(ValueError):
            O.check(key, value)


def test_env_overrides_are_applied_and_recorded(monkeypatch, tmp_path):
    monkeypatch.setenv("LOTUS_LOADER_ARGS", json.dumps({"prefetch_factor": 4, "persistent_workers": True,
                                                        "bogus": 1}))
    monkeypatch.setenv("LOTUS_WORKERS", "2")
    loader = DataLoader(D.MapDS(n=8), 4, False, trace_dir=tmp_path)  # positional batch_size/shuffle
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 4, True)
    assert loader._lotus_requested == {"prefetch_factor": None, "persistent_workers": False, "num_workers": 0}
    expected = list(torch.utils.data.DataLoader(D.MapDS(n=8), 4, False))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(loader, expected, strict=True))  # same samples, in order


def test_zero_workers_drops_worker_only_settings(monkeypatch):
    monkeypatch.setenv("LOTUS_WORKERS", "0")
    loader = DataLoader(D.MapDS(n=8), batch_size=4, num_workers=3, persistent_workers=True, prefetch_factor=5,
                        timeout=10, multiprocessing_context="spawn")
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor, loader.timeout) == (0, False,
                                                                                                      None, 0)
    assert len(list(loader)) == 2
