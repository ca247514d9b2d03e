"""Wait buckets, delay, head-of-line blocking and the in_order=False model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import hol_per_batch, wait_buckets, wait_stats, wait_table
from lotus.analysis.runs import load_config
from lotus.analysis.waitcore import _replay

MS = 1_000_000


def _batches(rows):
    """Hand-made batches: (batch_id, prep_end_ms, wait_start_ms, wait_ms, buffered)."""
    cols = {"rank": 0, "loader": 0, "epoch": 0}
    df = pd.DataFrame([{**cols, "batch_id": b, "prep_end_ns": int(p * MS), "wait_start_ns": int(s * MS),
                        "wait_dur_ns": int(w * MS), "buffered": buf} for b, p, s, w, buf in rows])
    for c in ("prep_end_ns", "wait_start_ns", "wait_dur_ns"):
        df[c] = df[c].astype("Int64")
    df["buffered"] = df["buffered"].astype("boolean")
    df["consumed_ns"] = df["wait_start_ns"] + df["wait_dur_ns"]
    df["arrive_ns"] = pd.array([pd.NA] * len(df), dtype="Int64")
    df["delay_ns"] = df["consumed_ns"] - df["prep_end_ns"]
    df["worker_id"] = pd.array(range(len(df)), dtype="Int64")
    return df


def test_buckets():
    b = _batches([(0, 0, 0, 0.0005, False), (1, 0, 10, 0.5, False), (2, 0, 20, 3, False), (3, 0, 30, 600, False),
                  (4, 0, 700, 0.001, True)])
    assert wait_buckets(b) == {"buffered": 0.2, "up_to_1ms": 0.4, "over_1ms": 0.4, "over_500ms": 0.2}


def test_head_of_line_blocking_and_in_order_false_saving():
    # batch 0 is slow (ready at 100 ms); batch 1 ready at 10 ms; the loop asks at 0 and again 5 ms after use
    b = _batches([(0, 100, 0, 100, False), (1, 10, 105, 0.01, True)])
    hol = hol_per_batch(b)
    assert hol.loc[0, "hol_blocked_ns"] == pytest.approx(90 * MS)  # from 10 ms (batch 1 ready) to 100 ms
    assert hol.loc[1, "hol_blocked_ns"] == 0
    s = wait_stats(b)["head_of_line"]
    assert s["blocked_batches"] == 1
    # out of order: request 0 gets batch 1 at 10 ms, request 1 (at 15 ms) waits for batch 0 until 100 ms
    assert s["in_order_false_saving_ms"] == pytest.approx(100.01 - (10 + 85.01), abs=0.02)


def test_replay_reproduces_measured_waits_in_order():
    rng = np.random.default_rng(1)
    ws = np.cumsum(rng.uniform(1, 5, 50))
    ready = ws + rng.uniform(-3, 3, 50)
    wd = np.maximum(ready - ws, 0) + 0.01
    ws = np.concatenate([[ws[0]], (ws + wd)[:-1] + rng.uniform(1, 5, 49)])  # consistent request times
    wd = np.maximum(ready - ws, 0) + 0.01
    assert _replay(ws, wd, ready, ready) == pytest.approx(wd)
    assert _replay(ws, wd, ready, np.sort(ready)).sum() <= wd.sum() + 1e-9


def test_stragglers_give_a_saving(straggler_run):
    s = wait_stats(load_config(straggler_run).batches)
    hol = s["head_of_line"]
    assert hol["blocked_batches"] > 0
    assert hol["in_order_false_saving_ms"] > 0
    assert 0 < hol["in_order_false_saving_share"] <= hol["blocked_share_of_wait"] + 1e-9


def test_wait_unknown_for_old_original_logs(reference_dir):
    s = wait_stats(load_config(reference_dir / "traces" / "b128_gpu4").batches)
    assert s["known"] is False
    assert "SBatchWait" in s["reason"]
    assert s["batches"] == 8
    assert s["delay_ms"]["count"] == 8


def test_original_wait_placeholder_is_buffered(synth_original):
    b = load_config(synth_original).batches
    w = b[b["buffered"].fillna(False).astype(bool)]
    assert len(w) and (w["wait_dur_ns"] == 1000).all()
    assert wait_stats(b)["buckets"]["buffered"] == pytest.approx(len(w) / 12)


def test_wait_table_sorting(synth_native):
    b = load_config(synth_native).batches
    by_dur = wait_table(b, sort="duration")
    assert by_dur["wait_ms"].is_monotonic_decreasing
    by_id = wait_table(b, sort="batch_id")
    assert by_id["batch_id"].tolist() == sorted(by_id["batch_id"])
    assert len(by_id) == 12


def test_real_run_waits(real_run):
    cfg = load_config(real_run)
    s = wait_stats(cfg.batches)
    assert s["known"] and s["batches"] == 16
    assert sum(s["buckets"][k] for k in ("buffered", "up_to_1ms", "over_1ms")) == pytest.approx(1)
    assert s["delay_ms"]["min"] >= 0  # consumed after the end of preprocessing


def test_window_wait_share_is_the_loops_waits_in_the_rates_window(tmp_path):
    """The wait share beside the one measure: the loop's waits of the batches inside the rate's window
    (after the ramp, epoch starts in) over the window's seconds; the job's own clock computes the same."""
    from lotus.analysis.throughput import throughput
    from lotus.trace.synthetic import PipelineSpec, write_native

    write_native(tmp_path / "r", PipelineSpec(n_batches=12, n_workers=2, epochs=5, seed=3))
    cfg = load_config(tmp_path / "r")
    t = throughput(cfg.batches, cfg.loaders)
    b = cfg.batches.sort_values("consumed_ns")
    cons = b["consumed_ns"].to_numpy(np.int64)
    wait = b["wait_dur_ns"].to_numpy(np.float64)
    k = len(cons) - t["steady_batches"]  # the ramp (and start-up) left out
    assert k >= 4  # 2 workers x prefetch 2
    expected = wait[k:].sum() / (cons[-1] - cons[k - 1])
    assert t["window_wait_share"] == pytest.approx(expected)
    assert 0 < t["window_wait_share"] < 1
