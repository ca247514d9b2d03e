"""Failed batches and exhausted fetches in the analyses: counted and reported, never timed or drawn as
batches (statistics, wait, verdict, diff, info, report, plots, Chrome trace, export)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lotus.analysis import (
    build_report,
    config_stats,
    diff_runs,
    op_stats,
    preprocessing_stats,
    render_html,
    run_info,
    verdict,
    wait_stats,
    worker_utilisation,
    write_chrome_trace,
)
from lotus.analysis.info import outcome_note
from lotus.analysis.plotdata import delay_frame, timeline_frame, wait_frame
from lotus.analysis.runs import load_config
from tests.trace.outcome_run import OK_FETCH_MS, write_outcome_run

MS = 1e6


@pytest.fixture(scope="module", params=[False, True], ids=["current", "legacy"])
def cfg(request, tmp_path_factory):
    c = load_config(write_outcome_run(tmp_path_factory.mktemp("outcomes") / "run", legacy=request.param))
    c.legacy = request.param
    return c


def test_preprocessing_stats_count_only_ok_batches(cfg):
    st = preprocessing_stats(cfg.batches)
    assert st["count"] == 6
    assert st["mean"] == pytest.approx(15.0)  # 10..20 ms; the 500 ms failure and 200 ms exhaustions left out
    assert st["max"] == pytest.approx(20.0)


def test_op_stats_leave_out_ops_of_failed_and_exhausted_fetches(cfg):
    ops = op_stats(cfg.events)
    assert ops["Crop"]["count"] == 12 and ops["Crop"]["max"] == pytest.approx(1.0)  # not the failed 300 ms
    assert ops["load"]["count"] == 12 and ops["load"]["max"] == pytest.approx(2.0)  # not the exhausted 150 ms
    assert ops["sample"]["count"] == 12
    assert ops["collate"]["count"] == 6


def test_config_stats_reports_the_outcomes(cfg):
    st = config_stats(cfg.events, cfg.batches, remove_outliers=True)
    assert st["batch_preprocessing_ms"]["count"] + st["outliers_removed"] == 6
    o = st["outcomes"]
    assert (o["failed"], o["failed_by_worker"], o["exhausted"]) == (1, {"r0/w1": 1}, 2)
    note = outcome_note(o)
    assert "1 failed batch (the fetch raised; r0/w1: 1)" in note
    assert "2 exhausted fetches (IterableDataset end), not batches" in note
    assert "dispatched" not in note and "2 indices dispatched" in outcome_note(o, dispatched=True)


def test_wait_and_delay_leave_out_the_failed_batch(cfg):
    w = wait_stats(cfg.batches)
    assert w["known"] and w["batches"] == 6
    assert w["wait_ms"]["count"] == 6 and w["wait_ms"]["max"] < 900  # the failed batch waited 900 ms
    assert w["delay_ms"]["count"] == 6
    assert len(wait_frame(cfg.batches)) == 6 and len(delay_frame(cfg.batches)) == 6


def test_verdict_counts_batches_not_fetches(cfg):
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["batches"] == 6
    assert v["outcomes"]["failed"] == 1 and v["outcomes"]["exhausted"] == 2
    assert v["slowest_op"]["calls"] == 12
    total_ok_ns = sum(OK_FETCH_MS.values()) * MS
    assert v["slowest_op"]["share_of_preprocessing"] == pytest.approx(12 * 2 * MS / total_ok_ns)  # load
    util = worker_utilisation(cfg.batches)
    assert util["batches"].sum() == 6 and util["busy_ns"].sum() == pytest.approx(total_ok_ns)


def test_diff_compares_ok_batches_and_counts_the_rest(cfg):
    d = diff_runs(cfg.events, cfg.batches, cfg.events, cfg.batches)
    assert d["batches"]["matched"] == 6
    assert d["batches"]["failed"] == {"a": 1, "b": 1} and d["batches"]["exhausted"] == {"a": 2, "b": 2}
    assert d["batch_preprocessing_ms"]["count"] == {"a": 6, "b": 6}


def test_run_info_and_report(cfg):
    inf = run_info(cfg.events, cfg.batches)["batches"]
    assert (inf["prepared"], inf["consumed"], inf["failed"], inf["exhausted"], inf["dispatched_without_batch"]) \
        == (6, 6, 1, 2, 2)
    rep = build_report([cfg])
    c = rep["configs"][cfg.name]
    assert c["outcomes"]["exhausted"] == 2 and c["stats"]["batch_preprocessing_ms"]["count"] == 6
    html = render_html(rep)
    assert "2 exhausted fetches (IterableDataset end), not batches" in html
    assert "1 failed batch (the fetch raised; r0/w1: 1)" in html


def test_timeline_draws_failed_batches_apart(cfg):
    b = cfg.batches
    t1 = timeline_frame(b[b["epoch"] == 1])
    assert sorted(t1.loc[t1["kind"] == "failed", "batch_id"]) == [2]
    assert sorted(t1.loc[t1["kind"] == "preprocessing", "batch_id"]) == [0, 1]
    t0 = timeline_frame(b[b["epoch"] == 0])
    assert sorted(t0.loc[t0["lane"] != "training loop", "batch_id"]) == [0, 1, 2, 3]  # no exhausted bars


def test_chrome_marks_exhausted_and_failed_fetches(cfg, tmp_path):
    out = tmp_path / "t.json"
    s = write_chrome_trace(cfg.events, out, batches=cfg.batches)
    evs = json.loads(out.read_text())["traceEvents"]
    exh = [e for e in evs if e.get("name") == "exhausted"]
    assert len(exh) == 2 and all(e["ph"] == "i" and "dur" not in e for e in exh)
    assert sorted(e["args"]["took_ns"] for e in exh) == [200_000_000] * 2
    assert sorted(e["args"]["batch"] for e in exh) == [4, 5]
    failed = [e for e in evs if e.get("name") == "fetch (failed)"]
    assert len(failed) == 1 and failed[0]["ph"] == "X" and failed[0]["args"]["batch"] == 2
    fetches = [e for e in evs if e.get("name") == "fetch"]
    assert len(fetches) == 6 and all(e["args"]["flags"] == 0 for e in fetches)
    assert s.exhausted == 2 and s.failed == 1 and s.flows == 6
    # current files flag the main process's arrival of the "exhausted" message; legacy files did not
    assert sum(e.get("name") == "arrive (exhausted)" for e in evs) == (0 if cfg.legacy else 2)
    assert sum(e.get("ph") == "s" for e in evs) == 6


def test_export_keeps_status_and_outcome_counts(cfg, tmp_path):
    import pandas as pd

    from lotus.analysis.export import export_parquet, read_parquet_attrs

    _, bp = export_parquet(cfg.events, cfg.batches, tmp_path)
    back = pd.read_parquet(bp)
    assert back["status"].astype(str).tolist().count("failed") == 1 and len(back) == 7
    attrs = read_parquet_attrs(bp)
    assert attrs["exhausted"] == 2 and attrs["dispatched_without_batch"] == 2
    assert np.array_equal(back["failed"].to_numpy(), cfg.batches["failed"].to_numpy())


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "legacy"])
def test_info_of_a_scanned_table_counts_as_the_dataframe(legacy, tmp_path):
    """`lotus info` reads a scanned run's compact table (no per-batch DataFrame): the same counts."""
    run = write_outcome_run(tmp_path / "run", legacy=legacy)
    scanned = load_config(run, engine="scan", summary_only=True, census=True)
    assert scanned.table is not None
    in_memory = load_config(run)
    got = run_info(scanned.events, scanned.summary_batches)["batches"]
    want = run_info(in_memory.events, in_memory.batches)["batches"]
    assert got == want and got["failed"] > 0
