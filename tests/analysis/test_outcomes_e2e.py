"""End to end through lotus's DataLoader: the batches the loop received are the batch rows and the
statistics' count; exhausted fetches and failed batches are counted apart."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from lotus.analysis import config_stats, verdict, wait_stats
from lotus.analysis.runs import load_config
from lotus.dataloader import DataLoader
from lotus.query import fetch_outcomes


class Sharded(IterableDataset):
    """``n`` items sharded by worker id (item i goes to worker i % num_workers)."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        step, first = (1, 0) if info is None else (info.num_workers, info.id)
        return iter(torch.tensor([float(i)]) for i in range(first, self.n, step))


class FailsAt(Dataset):
    def __init__(self, n: int, bad: int):
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"item {i} is bad")
        return torch.tensor([float(i)])


def _close():
    from lotus.trace.writer import close_main_writers

    close_main_writers()


@pytest.mark.timeout(60)
def test_iterable_dataset_end_is_not_a_batch(tmp_path):
    loader = DataLoader(Sharded(23), batch_size=4, num_workers=2, multiprocessing_context="fork",
                        trace_dir=tmp_path)
    received = [len(b) for _ in range(2) for b in loader]  # two epochs
    del loader
    _close()
    assert len(received) == 12 and sum(received) == 46  # per epoch: w0 12 items (4, 4, 4), w1 11 (4, 4, 3)
    cfg = load_config(tmp_path)
    b = cfg.batches
    assert len(b) == len(received)
    assert b["consumed_ns"].notna().all() and not b["failed"].any()
    assert int(b["n_samples"].sum()) == 46
    st = config_stats(cfg.events, b)
    assert st["batch_preprocessing_ms"]["count"] == len(received)
    assert st["outcomes"]["exhausted"] == 4 and st["outcomes"]["exhausted_by_worker"] == {"r0/w0": 2, "r0/w1": 2}
    assert wait_stats(b)["batches"] == len(received)
    assert verdict(cfg.events, b)["batches"] == len(received)
    ev = cfg.events
    assert int((ev["name"] == "exhausted").sum()) == 4  # each worker finds its end once per epoch
    assert not ((ev["name"] == "fetch") & ((ev["arg"] & 2) != 0)).any()
    out = fetch_outcomes(ev)
    assert out["outcome"].tolist() == ["exhausted"] * 4 and set(out["worker_id"]) == {0, 1}


@pytest.mark.timeout(60)
def test_a_failed_batch_is_counted_with_its_worker(tmp_path):
    loader = DataLoader(FailsAt(24, bad=13), batch_size=4, num_workers=2, multiprocessing_context="fork",
                        trace_dir=tmp_path)
    received = 0
    try:
        for _ in loader:
            received += 1
    except ValueError as exc:
        assert "item 13 is bad" in str(exc)
        exc.__traceback__ = None  # drop the frames holding the iterator, so that its workers stop now
    else:
        pytest.fail("the bad item did not raise")
    del loader
    import gc

    gc.collect()
    _close()
    cfg = load_config(tmp_path)
    b = cfg.batches
    bad = b[b["failed"]]
    assert bad["batch_id"].tolist() == [3]  # items 12-15
    assert bad["status"].astype(str).tolist() == ["failed"]
    assert int(bad["worker_id"].iloc[0]) == int(bad["dispatch_worker"].iloc[0])
    st = config_stats(cfg.events, b)
    assert st["outcomes"]["failed"] == 1
    assert st["outcomes"]["failed_by_worker"] == {f"r0/w{int(bad['worker_id'].iloc[0])}": 1}
    assert st["batch_preprocessing_ms"]["count"] == len(b) - 1
    assert wait_stats(b)["batches"] == received == 3
