"""The model's arrive latency and one run's own concurrency levels (issue 24: a loop-bound run's queueing
is not a latency; contention from the run's own variation in workers busy at once)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lotus.model import measures

MS = 1_000_000


def _frame(prep_end, wait_start, arrive, put_ms=0.5):
    n = len(prep_end)
    prep_end, wait_start, arrive = (np.asarray(x, dtype=float) for x in (prep_end, wait_start, arrive))
    return pd.DataFrame({
        "queue_ns": arrive - prep_end, "pin_dur_ns": np.full(n, np.nan), "arrive_ns": arrive,
        "wait_start_ns": wait_start, "put_dur_ns": np.full(n, put_ms * MS)})


def test_a_loop_bound_run_queueing_is_not_its_latency():
    # batches ready long before the loop asks (140 ms in the queue); the loop receives each in 1.2 ms
    k = np.arange(200)
    prep_end = k * 40 * MS
    wait_start = prep_end + 140 * MS
    b = _frame(prep_end, wait_start, wait_start + 1.2 * MS)
    lat = measures.arrive_latency(b)
    assert lat == 0.5 * MS + 1.2 * MS  # the worker's put and the least receive time, not 141 ms of queueing


def test_batches_the_loop_waited_for_give_the_latency():
    k = np.arange(200)
    prep_end = k * 40 * MS
    wait_start = prep_end - 10 * MS  # the loop asks before the batch is ready...
    arrive = prep_end + 30 * MS  # ...and gets it 30 ms after its preparation ended
    b = _frame(prep_end, wait_start, arrive)
    assert measures.arrive_latency(b) == 30 * MS


def test_a_few_waited_batches_among_many_queued_ones_are_not_enough():
    k = np.arange(200)
    prep_end = k * 40 * MS
    wait_start = prep_end + 140 * MS
    arrive = wait_start + 1.2 * MS
    arrive[:3] = wait_start[:3] + 20 * MS  # three start-up batches: fewer than max(5, 2%)
    b = _frame(prep_end, wait_start, arrive)
    assert measures.arrive_latency(b) == 0.5 * MS + 1.2 * MS


def _workers(levels_ms):
    """Batches of 10 samples on workers; a batch prepared with c workers busy takes levels_ms[c] ms a
    sample: phases of 2 and then 4 workers running at once."""
    rows, t = [], 0.0
    for phase, c in enumerate((2, 4, 2, 4)):
        for rep in range(40):
            dur = levels_ms[c] * 10 * MS
            for w in range(c):
                rows.append({"rank": 0, "epoch": 0, "worker_id": w, "prep_start_ns": t, "prep_end_ns": t + dur,
                             "n_samples": 10, "phase": phase, "rep": rep})
            t += dur
    return pd.DataFrame(rows)


def test_levels_show_a_run_whose_workers_slow_down_together():
    b = _workers({2: 1.0, 4: 1.3})
    have = np.ones(len(b), bool)
    levels = measures.concurrency_levels(b, have, b["n_samples"].to_numpy(float))
    assert levels is not None
    (c_lo, ms_lo, _), (c_hi, ms_hi, _) = levels[0], levels[-1]
    assert c_lo < 2.5 and c_hi > 3.5
    assert ms_lo < 1.1 and ms_hi > 1.2


def test_levels_need_enough_batches():
    b = _workers({2: 1.0, 4: 1.0}).head(40)
    have = np.ones(len(b), bool)
    assert measures.concurrency_levels(b, have, b["n_samples"].to_numpy(float)) is None
