"""Stragglers across ranks and nodes (issue 26, item 3): lotus.analysis.ranks / collective, `lotus analyze ranks`."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import collective
from lotus.analysis.jsonutil import dumps
from lotus.analysis.ranks import rank_report
from lotus.analysis.runs import load_config
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.cli.conftest import run

JOB = {"n_batches": 40, "batch_size": 8, "n_workers": 2, "ranks": 4, "sync": True, "slow_rank": 2, "step_ms": 30,
       "seed": 1, "epochs": 2}


def job(tmp_path_factory, name: str, **kw) -> str:
    d = tmp_path_factory.mktemp("ranks") / name
    write_native(d, PipelineSpec(**{**JOB, **kw}), ranks_per_node=2)
    return d


@pytest.fixture(scope="module")
def slow_input(tmp_path_factory):
    return job(tmp_path_factory, "input", slow_rank_load=3.0)


@pytest.fixture(scope="module")
def slow_step(tmp_path_factory):
    return job(tmp_path_factory, "step", slow_rank_step_ms=30.0)


def report(path, engine="memory"):
    cfg = load_config(path, engine=engine)
    return rank_report(cfg.events, cfg.batches, cfg.loaders, cfg.files)


def test_the_slow_input_pipeline_is_named(slow_input):
    r = report(slow_input)
    s = r["straggler"]
    assert (s["rank"], s["node"], s["cause"], s["basis"]) == (2, "node01", collective.INPUT, "steps")
    assert r["collective"]["lockstep"] and s["held_share_of_loop"] > 0.3 and s["held_step_s"] == 0
    by_rank = {x["rank"]: x for x in r["ranks"]}
    assert by_rank[2]["wait_share"] > 0.3 > max(by_rank[k]["wait_share"] for k in (0, 1, 3))
    assert by_rank[2]["worker_busy_share"] > 0.9 and by_rank[2]["slowest_op"] == "load"
    # in lockstep the ranks go at one pace: the samples/s do not tell the straggler, the steps do
    assert len({round(x["samples_per_s"]) for x in r["ranks"]}) == 1
    nodes = {x["node"]: x for x in r["nodes"]}
    assert nodes["node00"]["ranks"] == [0, 1] and nodes["node01"]["held_s"] == pytest.approx(s["held_s"])
    assert nodes["node01"]["samples_per_s"] == pytest.approx(by_rank[2]["samples_per_s"] + by_rank[3]["samples_per_s"])


def test_a_slow_step_is_named(slow_step):
    s = report(slow_step)["straggler"]
    assert (s["rank"], s["cause"]) == (2, collective.STEP)
    assert s["slowest_share"] > 0.9 and s["held_input_s"] < 0.05 * s["held_s"]


def test_even_ranks_have_no_straggler(tmp_path_factory):
    r = report(job(tmp_path_factory, "even"))
    assert r["straggler"] is None and r["collective"]["lockstep"]
    assert r["collective"]["cost_share"] < 0.02


def test_ranks_not_in_lockstep_are_compared_by_rate(tmp_path_factory):
    r = report(job(tmp_path_factory, "indep", sync=False, slow_rank_load=3.0, n_batches=120))
    assert not r["collective"]["lockstep"] and r["collective"]["per_rank"] == {}
    s = r["straggler"]
    assert (s["rank"], s["basis"], s["cause"]) == (2, "rate", collective.INPUT)
    assert s["samples_per_s"] < 0.6 * s["others_median_samples_per_s"]


@pytest.mark.parametrize("fixture", ["slow_input", "slow_step"])
def test_same_on_both_engines(fixture, request):
    path = request.getfixturevalue(fixture)
    assert dumps(report(path, "memory")) == dumps(report(path, "scan"))


def test_step_table_blames_the_latest_hand_off():
    """Two ranks, three steps: rank 1 waits 40 ms longer for step 1 (input), asks 30 ms later for step 2."""
    ms = 1_000_000
    rows = []
    for rank, (w, ask) in enumerate([((1, 1, 1), (0, 100, 200)), ((1, 41, 1), (0, 100, 230))]):
        for k in range(3):
            start = 10**15 + ask[k] * ms
            rows.append({"rank": rank, "loader": 0, "epoch": 0, "batch_id": k, "wait_start_ns": start,
                         "wait_dur_ns": w[k] * ms, "consumed_ns": start + w[k] * ms, "failed": False})
    steps, lockstep = collective.step_table(pd.DataFrame(rows).astype({"failed": bool}), {0: 0, 1: 0})
    assert lockstep  # rank 0 asks for step 2 (t=200) after rank 1 got step 1 (t=141)
    assert steps["slowest_rank"].tolist() == [-1, 1, 1]
    assert steps["cause"].astype(str).tolist()[1:] == [collective.INPUT, collective.STEP]
    # late = the latest hand-off - the median (two ranks: half the spread)
    assert np.allclose(steps["late_ns"].to_numpy()[1:], [20 * ms, 15 * ms])
    assert np.allclose(steps["spread_ns"].to_numpy(), [0, 40 * ms, 30 * ms])


def test_cli_text_and_json(slow_input):
    text = run("analyze", "ranks", "-d", slow_input).output
    assert "rank 2 (node node01) holds the others back" in text and "cause: its input pipeline" in text
    assert "per node:" in text and "node01" in text
    doc = json.loads(run("analyze", "ranks", "-d", slow_input, "--json").output)
    (cfg,) = doc["configs"].values()
    assert cfg["straggler"]["rank"] == 2 and len(cfg["ranks"]) == 4


def test_cli_same_on_both_engines(slow_step, monkeypatch):
    out = {}
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        out[engine] = run("analyze", "ranks", "-d", slow_step, "--json").output
    assert out["memory"] == out["scan"]


def test_node_directories_are_one_job(slow_input):
    from lotus.trace.discover import find_runs

    (job_run,) = find_runs(slow_input)
    assert job_run.path == slow_input and len(job_run.native) == 4 * (1 + 2 * 2)
    assert [r.name for r in find_runs(slow_input, nodes=False)] == ["node00", "node01"]
    (parent,) = find_runs(slow_input.parent)  # a directory of runs whose one run is a job of two nodes
    assert parent.name == slow_input.name and parent.path == slow_input


def test_a_missing_node_and_a_truncated_rank_are_named(slow_input, tmp_path, caplog):
    import shutil

    bad = tmp_path / "job"
    shutil.copytree(slow_input, bad)
    shutil.rmtree(bad / "node00")  # a node's directory absent
    main = next((bad / "node01").glob("lotus-r3-main-*"))
    main.write_bytes(main.read_bytes()[: main.stat().st_size // 2 + 5])  # rank 3 killed mid-record
    with caplog.at_level(logging.WARNING, logger="lotus"):
        r = report(bad)
    msgs = [m.getMessage() for m in caplog.records]
    assert any("no trace files of rank(s) 0, 1 (world size 4)" in m for m in msgs)
    assert any("lotus-r3-main" in m and "truncated" in m for m in msgs)
    assert r["missing_ranks"] == [0, 1] and [x["rank"] for x in r["ranks"]] == [2, 3]
    assert r["straggler"]["rank"] == 2  # the rest is analysed
    out = run("analyze", "ranks", "-d", bad).output
    assert "missing: rank(s) 0-1 of 4" in out


def test_report_has_the_ranks_section(slow_input, tmp_path):
    run("report", "-d", slow_input, "-o", tmp_path / "r.html", "--no-figures")
    doc = json.loads((tmp_path / "report.json").read_text())
    (cfg,) = doc["configs"].values()
    assert cfg["ranks"]["straggler"]["rank"] == 2
    assert "<h3>Ranks and nodes</h3>" in (tmp_path / "r.html").read_text()


def test_single_rank_run(synth_native):
    r = report(synth_native)
    assert r["straggler"] is None and r["collective"]["steps"] == 0 and len(r["ranks"]) == 1


def test_mixed_format_versions_are_read_as_they_are(tmp_path, monkeypatch):
    """Rank 0 written in format 1 (the synthetic layout), rank 1 by today's DataLoader (format 3)."""
    import torch

    from lotus.dataloader import DataLoader
    from lotus.trace.native import read_header
    from lotus.trace.writer import close_main_writers

    write_native(tmp_path, PipelineSpec(n_batches=8, batch_size=4, n_workers=2, ranks=2, seed=5))
    for p in tmp_path.glob("lotus-r1-*"):
        p.unlink()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    data = [torch.full((3,), float(i)) for i in range(32)]
    loader = DataLoader(data, batch_size=4, num_workers=2, trace_dir=tmp_path)
    assert sum(1 for _ in loader) == 8
    close_main_writers()
    versions = {read_header(p)[0]["rank"]: read_header(p)[0]["version"] for p in tmp_path.glob("*-main-*")}
    assert versions[0] == 1 and versions[1] >= 3
    for engine in ("memory", "scan"):
        r = report(tmp_path, engine)
        assert [x["rank"] for x in r["ranks"]] == [0, 1] and r["missing_ranks"] == []
        assert all(x["batches"] == 8 and x["samples_per_s"] for x in r["ranks"])


@pytest.mark.parametrize("engine", ["scan", "memory"])
def test_the_report_from_its_columns_only_is_the_report(slow_input, slow_step, engine):
    """rank_report reads RANK_BATCH_COLUMNS of the batches: a scanned run makes only those (no whole
    DataFrame); the report is the same as from every column."""
    from lotus.analysis.ranks import RANK_BATCH_COLUMNS

    for path in (slow_input, slow_step):
        cfg = load_config(path, engine=engine)
        few = cfg.batches_of(RANK_BATCH_COLUMNS)
        if engine == "scan":
            assert cfg.__dict__.get("_batches") is None and list(few.columns) == RANK_BATCH_COLUMNS
        part = dumps(rank_report(cfg.events, few, cfg.loaders, cfg.files))
        whole = load_config(path, engine=engine)
        assert part == dumps(rank_report(whole.events, whole.batches, whole.loaders, whole.files))


@pytest.mark.parametrize("engine", ["scan", "memory"])
def test_the_report_a_rank_at_a_time_is_the_report(slow_input, slow_step, engine, monkeypatch):
    """`lotus analyze ranks` reads a scanned run's batches a few whole ranks at a time (Config.batches_by_rank,
    each part's rows as pieces of a few rows cut at the ranks' rows): the pieces are those rows of the whole
    DataFrame, and the report is the same as from the whole DataFrame."""
    from lotus.analysis.ranks import RANK_BATCH_COLUMNS
    from lotus.query import batchtable, rankframes

    monkeypatch.setattr(batchtable, "FRAME_ROWS", 7)  # every table is "large": the rank-at-a-time path
    for path, per in ((slow_input, 1), (slow_step, 170)):  # a rank a part / two ranks a part
        monkeypatch.setattr(rankframes, "RANK_ROWS", per)
        cfg = load_config(path, engine=engine)
        got = cfg.batches_by_rank(RANK_BATCH_COLUMNS)  # the DataFrame itself where there is no table
        assert isinstance(got, pd.DataFrame) == (engine == "memory")
        parts = [[got]] if isinstance(got, pd.DataFrame) else [list(p) for p in got]
        whole = load_config(path, engine=engine)
        want = whole.batches[RANK_BATCH_COLUMNS]
        if engine == "scan":
            assert cfg.__dict__.get("_batches") is None and len(parts) == (4 if per == 1 else 2)
            assert [sorted(set(pd.concat(p)["rank"])) for p in parts] == ([[0], [1], [2], [3]] if per == 1
                                                                         else [[0, 1], [2, 3]])
            assert all(list(x.columns) == RANK_BATCH_COLUMNS and len(x) <= 7 for p in parts for x in p)
            assert all(len(p) > 1 for p in parts)
        pd.testing.assert_frame_equal(pd.concat([x for p in parts for x in p], ignore_index=True),
                                      want.reset_index(drop=True), check_exact=True)
        report = dumps(rank_report(cfg.events, iter(parts), cfg.loaders, cfg.files))
        assert report == dumps(rank_report(whole.events, whole.batches, whole.loaders, whole.files))


def test_step_table_of_rank_parts_is_the_step_table(slow_input):
    """The step table of per-rank step_rows (int32 where they fit) is step_table of the whole frame."""
    cfg = load_config(slow_input, engine="memory")
    b = cfg.batches
    loaders = {r: 0 for r in range(4)}
    want, lock = collective.step_table(b, loaders)
    parts = [collective.step_rows(b[b["rank"] == r], {r: 0}) for r in range(4)]
    assert any(a.dtype == np.int32 for p in parts for a in p.values())
    got, lock2 = collective.step_table_of(parts, loaders)
    assert lock == lock2 and not parts
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("chunk", [1, 6, 50])
def test_the_step_table_by_ranges_of_steps_is_the_step_table(slow_input, monkeypatch, chunk):
    """Made a range of steps at a time (ranges of one step, a few, many), the step table is the one of a single
    range, value for value, and the lockstep check across the ranges' borders agrees; its spread and lateness
    are those of a plain groupby of the same rows."""
    from lotus.query import failed_mask

    b = load_config(slow_input, engine="memory").batches
    loaders = {r: 0 for r in range(4)}
    want, lock = collective.step_table(b, loaders)
    monkeypatch.setattr(collective, "STEP_CHUNK_ROWS", chunk)
    got, lock2 = collective.step_table(b, loaders)
    assert lock == lock2 and len(got) > 10
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    ok = b[(b["loader"] == 0) & b["consumed_ns"].notna() & b["wait_start_ns"].notna() & ~failed_mask(b)]
    g = ok.groupby(["epoch", "batch_id"])["consumed_ns"]
    ref = pd.DataFrame({"spread": g.max() - g.min(), "late": g.max() - g.median(), "n": g.size()})
    ref = ref[ref["n"] >= 2].reset_index()
    assert ref[["epoch", "batch_id"]].to_numpy().tolist() == want[["epoch", "batch_id"]].to_numpy().tolist()
    assert np.allclose(want["spread_ns"], ref["spread"].astype(float), rtol=0, atol=1e3)
    held = want["slowest_rank"].to_numpy() >= 0
    assert held.any() and np.allclose(want["late_ns"][held], ref["late"][held].astype(float), rtol=0, atol=1e3)


def test_a_step_a_rank_handed_out_twice_counts_its_last_row(monkeypatch):
    """Two rows of one rank for one step (its rows' order kept whatever the ranges): the later one counts."""
    ms = 1_000_000
    rows = []
    for rank, waits in ((0, (1, 1, 1)), (1, (1, 1, 1)), (1, (41,))):
        for k, w in enumerate(waits):
            k = 1 if len(waits) == 1 else k
            start = 10**15 + 100 * k * ms
            rows.append({"rank": rank, "loader": 0, "epoch": 0, "batch_id": k, "wait_start_ns": start,
                         "wait_dur_ns": w * ms, "consumed_ns": start + w * ms, "failed": False})
    frame = pd.DataFrame(rows).astype({"failed": bool})
    for chunk in (1, 1 << 20):
        monkeypatch.setattr(collective, "STEP_CHUNK_ROWS", chunk)
        steps, _ = collective.step_table(frame, {0: 0, 1: 0})
        assert steps["spread_ns"].tolist() == [0.0, 40.0 * ms, 0.0]
