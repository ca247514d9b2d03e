"""The fast num_workers=0 iterator (lotus.dataloader.fastpath): chosen for plain traced loops only, and
the same records as the general one."""

from __future__ import annotations

import pytest
import torch
from torchvision import transforms as T

from lotus.dataloader import DataLoader
from lotus.dataloader.fastpath import FastSingleProcessIter
from lotus.dataloader.iterators import TracedSingleProcessIter
from lotus.trace import load_events


def _double(x):
    return x * 2


class _DS(torch.utils.data.Dataset):
    def __init__(self):
        self.transform = T.Compose([T.Lambda(_double), T.Lambda(torch.neg)])

    def __len__(self) -> int:
        return 22

    def __getitem__(self, i):
        return self.transform(torch.full((3,), float(i))), i


def test_plain_traced_loops_get_the_fast_iterator(tmp_path, monkeypatch):
    from lotus.dataloader.config import STEPS_ENV

    assert type(iter(DataLoader(_DS(), batch_size=4, trace_dir=tmp_path / "a"))) is FastSingleProcessIter
    assert type(iter(DataLoader(_DS(), batch_size=4, trace_dir=tmp_path / "b", pin_memory=True))) \
        is TracedSingleProcessIter  # pinning: the general path (whether or not this torch can pin)
    monkeypatch.setenv(STEPS_ENV, "3")  # lotus run --steps: the general path ends the job
    assert type(iter(DataLoader(_DS(), batch_size=4, trace_dir=tmp_path / "c"))) is TracedSingleProcessIter


@pytest.mark.timeout(120)
@pytest.mark.parametrize("detail", ["full", "budget"])
def test_fast_and_general_iterators_write_the_same_records(tmp_path, detail):
    fast = DataLoader(_DS(), batch_size=4, trace_dir=tmp_path / "fast", trace_detail=detail)
    general = DataLoader(_DS(), batch_size=4, trace_dir=tmp_path / "general", trace_detail=detail)
    got_fast = [b for b in fast]
    general._lotus.epoch += 1  # what DataLoader.__iter__ does before making its iterator
    got_general = [b for b in TracedSingleProcessIter(general)]
    assert all(torch.equal(x[0], y[0]) for x, y in zip(got_fast, got_general, strict=True))
    del fast, general
    ev = {k: load_events(tmp_path / k) for k in ("fast", "general")}
    cols = ["name", "batch_id", "sample", "epoch"]
    a, b = (ev[k][cols].astype(str).reset_index(drop=True) for k in ("fast", "general"))
    if detail == "full":
        assert a.equals(b)
    else:  # the detail choice is timing-driven: compare the batch-level records
        keep = ["dispatch", "collate", "fetch", "wait", "consumed", "step", "epoch_start", "epoch_end"]
        a, b = (x[x["name"].isin(keep)].reset_index(drop=True) for x in (a, b))
        assert a.equals(b)
    assert (a["name"] == "fetch").sum() == 6


@pytest.mark.timeout(120)
def test_each_iterator_records_its_own_epoch(tmp_path):
    """Two iterators of one loader advanced in turn: each one's batches carry the epoch it was made in
    (DataLoader.__iter__ counts epochs), so no (epoch, batch) is recorded twice."""
    loader = DataLoader(_DS(), batch_size=4, trace_dir=tmp_path)
    first, second = iter(loader), iter(loader)
    for _ in range(3):
        next(first)
        next(second)
    del first, second, loader
    ev = load_events(tmp_path)
    fetch = ev[ev["name"] == "fetch"]
    assert sorted(zip(fetch["epoch"], fetch["batch_id"], strict=True)) == [(e, b) for e in (0, 1) for b in range(3)]
    waits = ev[ev["name"] == "wait"]
    assert len(waits) == 6 and waits.groupby("epoch").size().tolist() == [3, 3]


class _Many(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i):
        return torch.tensor([float(i)])


@pytest.mark.timeout(120)
def test_kept_batches_reach_the_file_with_every_flush(tmp_path):
    """The fast path packs its batches in bulk; a flush (the flusher thread's every 0.5 s) writes those
    kept so far, so a live reader is never more than a flush behind."""
    loader = DataLoader(_Many(), batch_size=2, trace_dir=tmp_path)
    it = iter(loader)
    for _ in range(10):
        next(it)
    loader._lotus.w.flush()
    fetch = load_events(tmp_path).query("name == 'fetch'")
    assert sorted(fetch["batch_id"]) == list(range(10))
    del it, loader


@pytest.mark.timeout(120)
def test_drains_from_another_thread_lose_and_repeat_nothing(tmp_path):
    import threading

    loader = DataLoader(_Many(), batch_size=2, trace_dir=tmp_path)
    w = loader._lotus.w
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            w.flush()

    t = threading.Thread(target=flusher)
    t.start()
    try:
        n = sum(1 for _ in loader)
    finally:
        stop.set()
        t.join()
    del loader
    ev = load_events(tmp_path)
    fetch = ev[ev["name"] == "fetch"]
    assert n == 2000 and sorted(fetch["batch_id"]) == list(range(2000))
    steps = ev[ev["name"] == "step"].sort_values("batch_id")
    assert steps["batch_id"].tolist() == list(range(2000))  # each hand-off's previous batch, in order


@pytest.mark.timeout(120)
@pytest.mark.detail_budget
def test_dispatch_starts_when_the_loop_asks_unless_lotus_worked_first(tmp_path):
    """A plain batch's dispatch starts at its wait's start (one clock read fewer); a batch whose detail
    choice ran first (lotus's own work) starts its dispatch after it, before its fetch."""
    from lotus.trace import schema as S

    loader = DataLoader(_Many(), batch_size=2, trace_dir=tmp_path)
    assert sum(1 for _ in loader) == 2000
    del loader
    ev = load_events(tmp_path)
    by = {k: ev[ev["name"] == k].set_index("batch_id").sort_index() for k in ("dispatch", "wait", "fetch")}
    detail = (by["fetch"]["arg"].astype(int) & S.FETCH_DETAIL) != 0
    same = by["dispatch"]["start_ns"] == by["wait"]["start_ns"]
    assert detail.sum() >= 1 and (~detail).sum() > 1000
    # most: a choice that came out plain also starts it after the choice, and how often the budget makes one
    # follows the measured costs (0.90-0.97 on a quiet 2-core VM, 0.89 with its other core busy, 0.79 in CI's two
    # test processes on a slow day): a share of timing, so only "most" is asserted; the structure is below
    assert same[~detail].mean() > 0.5
    assert not same[detail].any()
    assert (by["dispatch"]["start_ns"] >= by["wait"]["start_ns"]).all()
    assert (by["dispatch"]["start_ns"] + by["dispatch"]["dur_ns"] == by["fetch"]["start_ns"]).all()
