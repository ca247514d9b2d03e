"""Each defect the invariants found, with the smallest trace that showed it (the figure it gave before)."""

from __future__ import annotations

import json
import logging

import pytest

from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from lotus.analysis.trends import trends
from tests.invariants import rules as R
from tests.invariants import trace_rules as T
from tests.invariants.commands import TEMPLATE, engine, lotus
from tests.invariants.conftest import DEMO
from tests.invariants.shapes import Shape, write_shape

ENGINES = ["memory", "scan"]


def _trends(path, eng: str, bucket_share: float | None = None) -> tuple[dict, object]:
    with engine(eng):
        cfg = load_config(path, engine="auto")
    t = cfg.batches["consumed_ns"].dropna()
    bucket = None if bucket_share is None else (int(t.max()) - int(t.min())) / 1e9 * bucket_share
    return json.loads(dumps(trends(cfg.events, cfg.batches, bucket_s=bucket))), cfg.batches


def _json(*args) -> dict:
    res = lotus(*args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("eng", ENGINES)
def test_the_last_bucket_is_no_division_by_a_nanosecond(tmp_path, eng):
    """Two batches: the run's length is not a multiple of its twelfth, so a 13th bucket began a few ns
    before the last hand-off and its rate was taken over that span: 200,000 samples/s (3.2e9 on the
    README's demo run)."""
    t, batches = _trends(write_shape(tmp_path / "run", Shape(epochs=(2,))), eng)
    last = t["per_bucket"][-1]
    assert last["batches"] == 1 and last["samples_per_s"] is None and last["note"].startswith("too short")
    assert not T.check_trends(t, batches, "trends") and not R.check_json(t, "trends")
    demo, batches = _trends(DEMO, eng)
    assert not T.check_trends(demo, batches, "demo trends")
    assert demo["per_bucket"][-1]["samples_per_s"] is None


@pytest.mark.parametrize("eng", ENGINES)
def test_an_op_counts_in_the_bucket_its_batch_started_in(tmp_path, eng):
    """A batch that straddles a bucket edge: its op was counted in the next bucket, its preprocessing in
    its own, and the slowest op took 157% of the next bucket's preprocessing."""
    shape = Shape(workers=1, epochs=(4,), prep_us=(10_000, 2_000), step_us=(0,), ops=1)
    t, _ = _trends(write_shape(tmp_path / "run", shape), eng, bucket_share=0.5)
    shares = [r["slowest_op_share"] for r in t["per_bucket"] if r["slowest_op_share"] is not None]
    assert shares and all(0 < s <= 1 for s in shares)


def test_a_wait_across_bucket_edges_counts_its_part_in_each(tmp_path):
    """A 50 ms wait counted whole in the bucket it started in, a tenth of the run long: wait share 470%."""
    shape = Shape(workers=1, epochs=(3,), prep_us=(50_000,))
    t, _ = _trends(write_shape(tmp_path / "run", shape), "memory", bucket_share=0.1)
    shares = [r["wait_share"] for r in t["per_bucket"] if r["wait_share"] is not None]
    assert max(shares) == pytest.approx(1.0) and min(shares) >= 0


@pytest.mark.parametrize("eng", ENGINES)
def test_the_share_of_a_sampled_op_is_over_the_detail_batches(tmp_path, eng):
    """Per-op detail for one batch in three, the slow one: its op time scaled to all batches over all
    batches' preprocessing was 128% of preprocessing. The share is now over the detail batches (load is
    45% of each batch's preprocessing in this trace), in the verdict and in the trends alike."""
    run = write_shape(tmp_path / "run", Shape(epochs=(3,), prep_us=(20_000, 500, 500), detail_every=3, ops=0))
    with engine(eng):
        v = _json("analyze", "verdict", "-d", run)["configs"]["run"]
    load = next(o for o in v["ops"] if o["name"] == "load")
    assert load["share_of_preprocessing"] == pytest.approx(0.45, abs=0.01) and load["sampled_share"] == 1 / 3
    t, _ = _trends(run, eng)
    assert t["per_epoch"][0]["slowest_op_share"] == pytest.approx(load["share_of_preprocessing"])


@pytest.mark.parametrize("eng", ENGINES)
def test_the_interval_of_a_mean_time_is_never_below_zero(tmp_path, eng):
    """Two detail batches of very different cost: the mean load's 95% interval was -1.08 .. 3.33 ms."""
    run = write_shape(tmp_path / "run", Shape(workers=1, epochs=(3,), prep_us=(20_000, 20, 20), detail_every=2,
                                              ops=0))
    with engine(eng):
        ops = _json("analyze", "stats", "-d", run)["configs"]["run"]["ops_ms"]
        slow = _json("analyze", "verdict", "-d", run)["configs"]["run"]["slowest_op"]
    lo, hi = ops["load"]["mean_ci95"]
    assert lo == 0.0 and hi > ops["load"]["mean"] and slow["mean_ci95_ms"] == [lo, hi]


def test_a_run_of_one_empty_epoch(tmp_path):
    """An epoch that handed out no batch, and nothing else: the scan engine's op table and the viz
    overview failed with internal errors (IndexError, ValueError)."""
    run = write_shape(tmp_path / "run", Shape(workers=0, epochs=(0,)))
    with engine("scan"):
        for args in (["analyze", "stats"], ["analyze", "verdict"], ["report", "-o", tmp_path / "r.html"],
                     ["viz", "-o", tmp_path / "t.json"]):
            res = lotus(*args, "-d", run)
            assert res.exit_code == 0 and "error" not in res.stderr, (args, res.stderr)
        assert lotus("diff", run, run).exit_code == 0


@pytest.mark.parametrize("eng", ENGINES)
def test_clocks_apart_give_no_negative_delay(tmp_path, eng, caplog):
    """A worker on a clock 200 us ahead of its main process: batches were 'consumed 0.08 ms before they
    were ready'. Their delay is unknown now, and one warning says why."""
    run = write_shape(tmp_path / "run", Shape(worker_skew_us=200))
    with engine(eng), caplog.at_level(logging.WARNING, logger="lotus"):
        w = _json("analyze", "wait", "-d", run)["configs"]["run"]
    assert w["delay_ms"]["min"] >= 0 and w["delay_ms"]["count"] < w["batches"]
    assert any(d["delay_ms"] is None for d in w["batches_detail"])
    assert "the processes' clocks disagree" in caplog.text


def test_clocks_apart_give_no_negative_start_latency(tmp_path):
    """A worker 300 us behind its main process: the model's dispatch-to-start latency was -0.1 ms."""
    run = write_shape(tmp_path / "run", Shape(worker_skew_us=-300, prep_us=(20,)))
    assert _json("whatif", "-d", run)["model"]["start_latency_ms"] >= 0


def test_an_unknown_delay_prints_as_a_dash(tmp_path):
    """Worker files lost: the waits' table printed 'nan' for every delay."""
    run = write_shape(tmp_path / "run", Shape(epochs=(3,)))
    for p in run.glob("*-w*"):
        p.unlink()
    res = lotus("analyze", "wait", "-d", run)
    assert res.exit_code == 0 and not R.check_text(res.stdout, "wait")
    assert "      -       0.000  no" in res.stdout


def test_the_wait_json_has_the_outcomes_its_text_prints(tmp_path):
    """`analyze wait` printed 'not in these numbers: 1 failed batch' with no such figure in its JSON."""
    run = write_shape(tmp_path / "run", Shape(failed=frozenset({(0, 1)})))
    w = _json("analyze", "wait", "-d", run)["configs"]["run"]
    assert w["outcomes"]["failed"] == 1
    text = lotus("analyze", "wait", "-d", run).stdout
    assert "1 failed batch" in text and not R.check_backed(text, {"configs": {"run": w}}, "wait", TEMPLATE)


def test_the_throughput_json_says_why_the_ramp_is_that_long(tmp_path):
    """The text said '(2 workers x prefetch 2)', the JSON had neither figure."""
    run = write_shape(tmp_path / "run", Shape(epochs=(12,)))
    t = _json("analyze", "throughput", "-d", run)["configs"]["run"]
    assert t["left_out"]["ramp"] == "2 workers x prefetch 2" and t["left_out"]["ramp_batches"] == 4
    assert "(2 workers x prefetch 2)" in lotus("analyze", "throughput", "-d", run).stdout


def test_equal_slowdowns_are_listed_in_the_same_order_on_both_engines(tmp_path):
    """Preprocessing and collation slowed down by the same share: the engines' means differ in the last
    bits, so `diff` listed them in the opposite order on each (hypothesis found it with three ranks and two
    failed batches, and ran out of time shrinking it further)."""
    run = write_shape(tmp_path / "run", Shape(ranks=3, workers=0, batch_size=2, epochs=(3,), prep_us=(2244, 2996),
                                              step_us=(277,), failed=frozenset({(0, 0), (0, 1)})))
    base = write_shape(tmp_path / "base", Shape(epochs=(5, 5), prep_us=(4_000, 6_000)))
    order = {}
    for eng in ENGINES:
        with engine(eng):
            order[eng] = [s["what"] for s in _json("diff", run, base)["slower"]]
    assert order["memory"] == order["scan"] and order["memory"][:2] == ["batch preprocessing", "collate"]


def test_a_window_s_seconds_are_exact_integer_ns(tmp_path):
    """A loop that does nothing but wait: its steady window's wait share was 1.0000183 (hypothesis: three ranks
    and an empty epoch; smallest found by hand). The estimator took wall-clock ns as float64, 256 ns apart."""
    run = write_shape(tmp_path / "run", Shape(workers=1, epochs=(3,), step_us=(0,), prep_us=(541, 770)))
    t = _json("analyze", "throughput", "-d", run)["configs"]["run"]
    assert t["window_wait_share"] == 1.0


@pytest.mark.parametrize("shape", [Shape(workers=0, epochs=(2,), step_us=(0,)),
                                   Shape(workers=1, epochs=(6,), step_us=(0,), prep_us=(9_000,))],
                         ids=["num_workers=0", "1 worker"])
def test_no_worker_count_from_a_loop_that_only_waits(tmp_path, shape):
    """A loop whose steps take no time: the verdict divided by a 1 ns floor of the loop's own time and
    suggested num_workers=10000207 (53913308 with one worker)."""
    run = write_shape(tmp_path / "run", shape)
    v = _json("analyze", "verdict", "-d", run)["configs"]["run"]
    (more,) = [s["text"] for s in v["suggestions"] if s["id"] == "more_workers"]
    assert "no number of workers hides preprocessing" in more and not R.check_json(v, "verdict")


def test_no_successful_detail_batch(tmp_path):
    """Per-op detail for one batch in two, and that batch failed: the detail share is 0 and `analyze stats`,
    `report` and the figures failed dividing by it (ZeroDivisionError)."""
    run = write_shape(tmp_path / "run", Shape(workers=0, epochs=(2,), failed=frozenset({(0, 0)}), detail_every=2,
                                              ops=0))
    for eng in ENGINES:
        with engine(eng):
            ops = _json("analyze", "stats", "-d", run)["configs"]["run"]["ops_ms"]
            assert ops["load"]["count"] == 0 and ops["load"]["sampled_share"] == 0.0
            assert lotus("report", "-d", run, "-o", tmp_path / eng / "r.html").exit_code == 0



def test_each_page_cache_size_is_profiled_once():
    """A 1.5 MB dataset: the grid 0, 25, 50, 75, 100% of it to the MB was 0, 0, 0.001, 0.001, 0.001 GB, and
    `lotus sensitivity` printed each measured point three times and one note nine times (recorded on this
    VM)."""
    from lotus.profile.matrix import cache_grid

    assert cache_grid(1_481_524 / 1e9) == [0.0, 0.001]
    assert cache_grid(64.0) == [0.0, 16.0, 32.0, 48.0, 64.0]


def test_the_files_of_a_run_are_not_copied_by_every_dataframe_operation(tmp_path):
    """pandas deep-copies attrs on every operation: a run of 401 files (8 workers x 50 epochs) took 3.4 s
    for `lotus report --no-figures`, 0.6 s once the file list is shared."""
    cfg = load_config(write_shape(tmp_path / "run", Shape(epochs=(2, 2))), engine="memory")
    files = cfg.events.attrs["files"]
    assert len(files) == 5 and cfg.events.iloc[:3].copy().attrs["files"] is files
