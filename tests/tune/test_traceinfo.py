"""Tuning's samples/s (lotus.analysis.throughput: the ramp left out) and epoch facts from hand-made batch
tables."""

from __future__ import annotations

import pandas as pd
import pytest

from lotus.analysis.throughput import ramp_batches, throughput
from lotus.tune.traceinfo import effective_settings, epoch_facts, used_cuda

MS = 1_000_000
DESC = {"num_workers": 2, "prefetch_factor": 2, "batch_size": 8, "dataset_len": 80, "drop_last": False,
        "pin_memory": False, "persistent_workers": False}


def window_rate(batches, desc):
    loaders = {(r, 0): desc for r in batches["rank"].unique()}
    return throughput(batches, loaders)["samples_per_s"]


def _batches(times_ms_by_epoch: dict[int, list[float]], rank: int = 0) -> pd.DataFrame:
    rows = [{"loader": 0, "rank": rank, "epoch": e, "batch_id": i, "consumed_ns": int(t * MS), "n_samples": 8,
             "prep_dur_ns": 20 * MS, "gpu_step_ns": pd.NA}
            for e, ts in times_ms_by_epoch.items() for i, t in enumerate(ts)]
    return pd.DataFrame(rows).astype({"consumed_ns": "Int64", "n_samples": "Int64", "gpu_step_ns": "Int64"})


def test_the_ramp_is_left_out():
    # 4 batches in flight (2 workers x 2) ready at once, then one every 10 ms
    ts = [0, 1, 2, 3] + [3 + 10 * i for i in range(1, 21)]
    b = _batches({0: ts})
    assert ramp_batches(DESC) == 4 and ramp_batches({"num_workers": 0}) == 1
    assert ramp_batches({"num_workers": 3, "prefetch_factor": None}) == 6
    assert window_rate(b, DESC) == pytest.approx(8 / 0.010)
    first_only = 8 * (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e3)
    assert first_only > window_rate(b, DESC) * 1.05  # what leaving out only the first batch gives
    # ranks add up; too few batches: None
    two = pd.concat([b, _batches({0: ts}, rank=1)], ignore_index=True)
    assert window_rate(two, DESC) == pytest.approx(2 * 8 / 0.010)
    assert window_rate(_batches({0: [0]}), DESC) is None


def test_epoch_starts_inside_the_window_count():
    e0 = [10 * i for i in range(10)]
    e1 = [100 + 200 + 10 * i for i in range(10)]  # 200 ms more than a step before epoch 1 (workers restart)
    b = _batches({0: e0, 1: e1})
    rate = window_rate(b, {**DESC, "num_workers": 0})
    assert rate == pytest.approx(8 * 19 / ((e1[-1] - e0[0]) / 1e3))
    ev = pd.DataFrame({"name": pd.Categorical(["epoch_start", "epoch_start"]), "loader": [0, 0], "rank": [0, 0],
                       "epoch": [0, 1], "start_ns": [-50 * MS, 100 * MS]})
    f = epoch_facts(ev, b, DESC)
    assert f.batches_per_epoch == 10 and f.epochs_crossed == 1
    assert f.batch_interval_s == pytest.approx(0.010)
    assert f.boundary_extra_s == pytest.approx(0.200)
    assert f.startup_s == pytest.approx(0.050) and f.batch_prep_s == pytest.approx(0.020)


def test_settings_and_cuda():
    s = effective_settings(DESC)
    assert (s.num_workers, s.prefetch_factor, s.pin_memory, s.persistent_workers) == (2, 2, False, False)
    assert effective_settings({**DESC, "num_workers": 0}).prefetch_factor is None
    assert effective_settings({}) is None
    b = _batches({0: [0, 10, 20]})
    assert not used_cuda(b)
    b["gpu_step_ns"] = pd.array([5 * MS] * 3, dtype="Int64")
    assert used_cuda(b)
