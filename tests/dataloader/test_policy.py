"""Loader policies: every sample exactly once per epoch, and the intended effect."""

from __future__ import annotations

import itertools

import pytest
import torch

from lotus.dataloader import DataLoader
from lotus.query import load_batches
from lotus.trace.writer import close_main_writers
from tests.dataloader import datasets as D

ASSIGN = ["round_robin", "free_worker"]
DELIVER = ["in_order", "lowest_ready_first", "arrival"]


def _ids(batches):
    return sorted(int(i) for b in batches for i in b["id"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("assignment,delivery", list(itertools.product(ASSIGN, DELIVER)))
@pytest.mark.parametrize("persistent", [False, True])
def test_every_sample_exactly_once(assignment, delivery, persistent, tmp_path):
    loader = DataLoader(D.SkewedDS(n=30, slow=(0, 7), slow_s=0.2), batch_size=3, num_workers=3,
                        persistent_workers=persistent, worker_assignment=assignment, delivery_order=delivery,
                        shuffle=True, trace_dir=tmp_path)
    for _ in range(2):
        assert _ids(list(loader)) == list(range(30))
    del loader
    close_main_writers()
    b = load_batches(tmp_path)
    consumed = b[b["consumed_ns"].notna()]
    assert len(consumed) == 20 and consumed["prep_dur_ns"].notna().all()


@pytest.mark.timeout(60)
def test_policies_work_untraced():
    loader = DataLoader(D.SkewedDS(n=24, slow=(0,), slow_s=0.2), batch_size=4, num_workers=2,
                        worker_assignment="free_worker", delivery_order="lowest_ready_first")
    assert type(iter(loader)).__name__ == "TracedMultiProcessingIter"
    assert _ids(list(loader)) == list(range(24))


def _first_batches(tmp_path, **policy):
    loader = DataLoader(D.SkewedDS(n=64, slow=(0, 1, 2, 3), slow_s=0.5), batch_size=4, num_workers=2,
                        trace_dir=tmp_path, **policy)
    order = [int(b["id"][0]) // 4 for b in loader]
    del loader
    close_main_writers()
    return order, load_batches(tmp_path)


@pytest.mark.timeout(60)
def test_lowest_ready_first_skips_a_slow_head_of_line_batch(tmp_path):
    order, batches = _first_batches(tmp_path / "lrf", delivery_order="lowest_ready_first")
    assert sorted(order) == list(range(16))
    assert order[0] != 0  # batch 0 (all slow samples) is handed out later, not waited for
    first = batches.sort_values("consumed_ns").iloc[0]
    assert int(first["batch_id"]) == order[0] and first["wait_dur_ns"] < 400_000_000
    order_io, _ = _first_batches(tmp_path / "io")
    assert order_io == list(range(16))


@pytest.mark.timeout(60)
def test_free_worker_moves_work_away_from_a_stuck_worker(tmp_path):
    # The loop keeps consuming while worker 0 is stuck on batch 0 (lowest_ready_first), so torch keeps
    # dispatching: round robin still queues every other batch behind the stuck one, free_worker does not.
    _, rr = _first_batches(tmp_path / "rr", delivery_order="lowest_ready_first")
    _, fw = _first_batches(tmp_path / "fw", delivery_order="lowest_ready_first", worker_assignment="free_worker")
    per_worker_rr = rr.groupby("worker_id").size().to_dict()
    per_worker_fw = fw.groupby("worker_id").size().to_dict()
    assert per_worker_rr == {0: 8, 1: 8}  # round robin: even split whatever the cost
    assert per_worker_fw[1] > per_worker_fw[0] + 2  # worker 1 takes the work worker 0 cannot


def test_policy_argument_errors():
    with pytest.raises(ValueError, match="num_workers > 0"):
        DataLoader(D.MapDS(), worker_assignment="free_worker")
    with pytest.raises(ValueError, match="num_workers > 0"):
        DataLoader(D.MapDS(), delivery_order="lowest_ready_first")
    with pytest.raises(ValueError, match="worker_assignment must be one of"):
        DataLoader(D.MapDS(), num_workers=1, worker_assignment="fastest")
    with pytest.raises(ValueError, match="contradicts"):
        DataLoader(D.MapDS(), num_workers=1, delivery_order="arrival", in_order=True)
    # torch's own in_order=False with num_workers=0 stays legal (a no-op, as in torch)
    DataLoader(D.MapDS(), in_order=False)
    loader = DataLoader(D.MapDS(), num_workers=1, delivery_order="arrival")
    assert loader.in_order is False
    torch.manual_seed(0)
