"""What the live sinks publish, against synthetic runs of known truth (tests/live/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.analysis.steady import steady_rate
from lotus.live import Tailer, snapshot
from lotus.live.sinks.values import run_values, scalars
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.live.conftest import SEC, rec, write_known_run


def _values(d, now, window_s=10.0, live=False):
    t = Tailer(d)
    t.poll()
    return run_values(t.state, snapshot(t.state, now, window_s), live=live)


def test_known_truth(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    write_known_run(tmp_path, t0)
    v = _values(tmp_path, t0 + 10 * SEC)
    assert v.step == 100  # the loop's batch count
    m = v.main
    assert (m.rank, m.loader, m.name, m.batches) == (-1, 0, "train", 100)
    assert m.samples_per_s == pytest.approx(320)
    assert m.ci95 == pytest.approx((320, 320))  # a perfectly even run: no spread
    assert m.wait_share == pytest.approx(0.2)
    assert m.worker_busy_share == pytest.approx(0.3)
    assert m.gpu_idle_share == pytest.approx(0.05)
    assert m.slowest_op == "Resize" and m.slowest_op_share == pytest.approx(3.2 / 6.0, abs=1e-3)
    (r0,) = v.ranks
    assert r0.rank == 0 and r0.host  # the hostname of the trace header
    tags = scalars(v)
    assert tags["lotus/samples_per_s"] == pytest.approx(320)
    assert tags["lotus/samples_per_s_ci95_lo"] == pytest.approx(320)
    assert tags["lotus/gpu_idle_from_data_share"] == pytest.approx(0.05)
    assert tags["lotus/slowest_op/Resize"] == pytest.approx(tags["lotus/slowest_op_share"])
    assert not any(k.startswith("lotus/rank") for k in tags)  # one rank: no per-rank tags


def test_the_rate_is_the_steady_measure_over_the_window(tmp_path, now_mono):
    """Mid-run: from the last hand-off before the window to the last one in it, through steady_rate; at
    the start of a run the prefetched ramp is left out (workers x prefetch_factor = 4 batches here)."""
    t0 = now_mono - 40 * SEC
    write_known_run(tmp_path, t0, n_batches=300)
    t = Tailer(tmp_path)
    t.poll()
    consumed = np.sort(t.state.rows[t.state.rows["kind"] == S.EV_CONSUMED]["start"])
    now = t0 + 30 * SEC
    v = run_values(t.state, snapshot(t.state, now, 10.0), live=True)
    sel = consumed[199:][consumed[199:] <= now]  # batch 199: the last hand-off before the window
    expect = steady_rate(sel, np.full(len(sel), 32.0), ramp=1, workers=2)
    assert v.main.samples_per_s == pytest.approx(expect.samples_per_s) == pytest.approx(320)
    assert v.main.ci95 == pytest.approx(expect.ci95)


def test_the_prefetched_ramp_is_left_out(tmp_path, now_mono):
    """The first workers x prefetch_factor batches were ready before the loop asked (10 ms apart here, then
    one per 100 ms): counted, they would put the rate at 8 * 29 / 2.6 s = 89 samples/s instead of 80."""
    t0 = now_mono - 20 * SEC
    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "train", "batch_size": 8, "num_workers": 2, "prefetch_factor": 2})
    times = [t0 + k * SEC // 100 for k in range(1, 5)] + [t0 + 40 * SEC // 1000 + k * SEC // 10 for k in range(1, 27)]
    for b, t in enumerate(times):
        rec(w, S.EV_CONSUMED, t, batch=b)
    w.close()
    v = _values(tmp_path, times[-1])
    assert v.main.samples_per_s == pytest.approx(80)
    assert v.main.ci95 == pytest.approx((80, 80))


def test_a_stalled_loop_reads_zero(tmp_path, now_mono):
    t0 = now_mono - 40 * SEC
    write_known_run(tmp_path, t0, n_batches=50)
    v = _values(tmp_path, t0 + 20 * SEC)  # nothing handed out in (10 s, 20 s]
    assert v.main.samples_per_s == 0.0 and v.main.ci95 is None
    assert v.step == 50


def test_ranks_add_up_and_are_published_per_rank(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    for rank, per_s in ((0, 10), (1, 20)):
        w = TraceWriter(tmp_path, "main", rank=rank, world_size=2)
        w.define_loader(0, {"name": "train", "batch_size": 4, "num_workers": 0})
        rec(w, S.EV_EPOCH_START, t0)
        for b in range(10 * per_s):
            rec(w, S.EV_WAIT, t0 + (b + 1) * SEC // per_s - SEC // (4 * per_s), SEC // (4 * per_s), batch=b)
            rec(w, S.EV_CONSUMED, t0 + (b + 1) * SEC // per_s, batch=b)
        w.close()
    v = _values(tmp_path, t0 + 10 * SEC)
    assert [(r.rank, r.samples_per_s) for r in v.ranks] == [(0, pytest.approx(40)), (1, pytest.approx(80))]
    assert v.main.samples_per_s == pytest.approx(120)
    assert v.main.wait_share == pytest.approx(0.25)
    assert v.step == 100  # rank 0's batch count
    tags = scalars(v)
    assert tags["lotus/rank1/samples_per_s"] == pytest.approx(80)
    assert tags["lotus/rank0/wait_share"] == pytest.approx(0.25)


def test_the_main_loader_is_the_one_with_most_batches(tmp_path, now_mono):
    t0 = now_mono - 20 * SEC
    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "val", "batch_size": 2, "num_workers": 0})
    w.define_loader(1, {"name": "train", "batch_size": 8, "num_workers": 0})
    for b in range(100):
        rec(w, S.EV_CONSUMED, t0 + (b + 1) * SEC // 10, batch=b, loader=1)
        if b < 20:
            rec(w, S.EV_CONSUMED, t0 + (b + 1) * SEC // 2, batch=b, loader=0)
    w.close()
    v = _values(tmp_path, t0 + 10 * SEC)
    assert v.main.name == "train" and v.step == 100
    assert v.main.samples_per_s == pytest.approx(80)
    assert {ld.name for ld in v.loaders} == {"val", "train"}


def test_no_loader_yet(tmp_path):
    TraceWriter(tmp_path, "main").close()
    v = _values(tmp_path, 0)
    assert v.main is None and v.step == 0 and scalars(v) == {}
