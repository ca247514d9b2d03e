"""Start-up steps (the first CUDA step: cuDNN autotuning, lazy init) are not the steady step time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lotus.model.measures import steps, warmup_steps


def _batches(step_ms, epochs=1):
    rows = []
    for e in range(epochs):
        for i, s in enumerate(step_ms):
            rows.append({"rank": 0, "epoch": e, "batch_id": i, "step_dur_ns": int(s * 1e6), "gpu_step_ns": pd.NA,
                         "wait_start_ns": pd.NA, "consumed_ns": pd.NA})
    b = pd.DataFrame(rows)
    for c in ("step_dur_ns", "gpu_step_ns", "wait_start_ns", "consumed_ns"):
        b[c] = b[c].astype("Int64")
    return b


def test_leading_slow_steps_of_each_epoch_are_warm_up():
    # measured on the H100 host: ResNet-50 b64, first step 848 ms, then ~20-30 ms
    ms = [848, 30, 20, 23, 19, 22, 21, 20, 20, 32, 22, 20]
    b = _batches(ms, epochs=2)
    mask = warmup_steps(b, b["step_dur_ns"].astype("float64").to_numpy())
    assert mask.tolist() == ([True] + [False] * 11) * 2
    step, source = steps(b)
    assert source == "step" and len(step) == 22
    assert np.mean(step) / 1e6 < 25  # 848 ms left in would make the mean 91 ms


def test_a_slow_step_later_in_the_epoch_stays():
    ms = [20, 21, 500, 20, 22, 21]  # a real stall (checkpoint, evaluation) is part of the steady state
    b = _batches(ms)
    assert not warmup_steps(b, b["step_dur_ns"].astype("float64").to_numpy()).any()
    assert len(steps(b)[0]) == 6


def test_short_runs_are_left_alone():
    b = _batches([900, 20, 20])
    assert not warmup_steps(b, b["step_dur_ns"].astype("float64").to_numpy()).any()
