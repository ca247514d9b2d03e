"""`lotus analyze ranks` rank by rank where the scan runs (lotus.analysis.rankmap, issue 26): the same JSON as the
whole run's scan, byte for byte; warnings and missing ranks said once; the client's settings travel with the tasks."""

from __future__ import annotations

import json
import shutil

import pytest

from lotus.analysis import rankmap
from lotus.query import spill
from lotus.trace import chunks
from lotus.trace.discover import scan_run as discover_run
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.cli.conftest import run

SPEC = {"n_batches": 40, "batch_size": 6, "n_workers": 2, "epochs": 2, "ranks": 4, "seed": 5, "sync": True,
        "slow_rank": 2, "slow_rank_load": 3.0}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("rankmap") / "job"
    write_native(d, PipelineSpec(**SPEC), ranks_per_node=2)
    return d


def whole_run(path):
    """The run of ``path`` with its nodes' directories (as lotus.trace.discover.find_runs makes it)."""
    from lotus.trace.discover import find_runs

    (r,) = find_runs(path)
    return r


def ranks_json(path, monkeypatch, jobs: int):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", str(jobs))
    r = run("analyze", "ranks", "-d", path, "--json", ok=False)
    assert r.exit_code == 0, r.output
    return r


def test_tasks_a_rank_each_only_where_it_pays(job, monkeypatch, tmp_path):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", "2")
    whole = whole_run(job)
    tasks = rankmap.tasks_of(whole)
    assert [sorted({int(p.name.split("-")[1][1:]) for p in t.files}) for t in tasks] == [[0], [1], [2], [3]]
    assert sorted(p for t in tasks for p in t.files) == sorted(whole.native)  # every file, once
    assert all(t.whole == tasks[0].whole and t.env["LOTUS_ENGINE"] == "scan" for t in tasks)
    assert "LOTUS_JOBS" not in tasks[0].env
    monkeypatch.setenv("LOTUS_JOBS", "1")
    assert rankmap.tasks_of(whole) is None  # one process: the whole run's scan
    monkeypatch.setenv("LOTUS_JOBS", "2")
    one = tmp_path / "one"
    write_native(one, PipelineSpec(**{**SPEC, "ranks": 1, "slow_rank": None}))
    assert rankmap.tasks_of(discover_run(one)) is None  # one rank
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    assert rankmap.tasks_of(whole) is None  # read in memory: nothing to split


@pytest.mark.timeout(300)
def test_same_report_as_the_whole_scan(job, monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_RECORDS", 997)  # forked processes see it too
    serial = ranks_json(job, monkeypatch, 1).output
    for jobs in (2, 3):
        assert ranks_json(job, monkeypatch, jobs).output == serial, jobs
    doc = json.loads(serial)["configs"]["job"]
    assert doc["straggler"]["rank"] == 2 and len(doc["ranks"]) == 4 and len(doc["nodes"]) == 2


@pytest.mark.timeout(300)
def test_missing_ranks_and_a_truncated_file_are_said_once(job, tmp_path, monkeypatch):
    bad = tmp_path / "job"
    shutil.copytree(job, bad)
    shutil.rmtree(bad / "node00")  # ranks 0 and 1 absent
    main = next((bad / "node01").glob("lotus-r3-main-*"))
    main.write_bytes(main.read_bytes()[: main.stat().st_size // 2 + 5])  # rank 3 killed mid-record
    serial = ranks_json(bad, monkeypatch, 1)
    split = ranks_json(bad, monkeypatch, 2)
    assert split.stdout == serial.stdout
    (doc,) = json.loads(split.stdout)["configs"].values()
    assert doc["missing_ranks"] == [0, 1] and [x["rank"] for x in doc["ranks"]] == [2, 3]
    for err in (serial.stderr, split.stderr):
        lines = err.splitlines()
        assert sum("no trace files of rank(s) 0, 1 (world size 4)" in x for x in lines) == 1, err
        assert sum("lotus-r3-main" in x and "truncated" in x for x in lines) == 1, err


@pytest.mark.timeout(300)
def test_a_rank_none_of_whose_files_reads(job, tmp_path, monkeypatch):
    """Every file of rank 1 unreadable: each named, rank 1 missing, the other ranks as the whole scan has them."""
    bad = tmp_path / "job"
    shutil.copytree(job, bad)
    for p in bad.rglob("lotus-r1-*"):
        p.write_bytes(b"not a trace")
    serial, split = ranks_json(bad, monkeypatch, 1), ranks_json(bad, monkeypatch, 2)
    assert split.stdout == serial.stdout
    doc = json.loads(split.stdout)["configs"]["job"]
    assert doc["missing_ranks"] == [1] and [x["rank"] for x in doc["ranks"]] == [0, 2, 3]
    for err in (serial.stderr, split.stderr):
        assert sum("lotus-r1-" in x and "file skipped" in x for x in err.splitlines()) == 5, err


@pytest.mark.timeout(300)
def test_the_clients_settings_travel_with_the_task(job, monkeypatch):
    """A task computes what the client would, whatever its own process's environment (a cluster's worker):
    the run-to-run spread the client set widens the task's interval, and one set on the worker only does not."""
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", "2")
    monkeypatch.setenv("LOTUS_RUN_SPREAD", "0.2")
    task = rankmap.tasks_of(whole_run(job))[0]
    assert task.env["LOTUS_RUN_SPREAD"] == "0.2"
    monkeypatch.setenv("LOTUS_RUN_SPREAD", "0")  # the worker's own setting, overridden by the task's
    wide = _interval(rankmap.rank_task(task)[0])
    task.env.pop("LOTUS_RUN_SPREAD")
    monkeypatch.setenv("LOTUS_RUN_SPREAD", "0.2")  # the worker's own, not the client's: unset for the task
    narrow = _interval(rankmap.rank_task(task)[0])
    assert wide > 1.5 * narrow > 0
    assert "LOTUS_RUN_SPREAD" in __import__("os").environ  # restored after the task


def _interval(parts) -> float:
    ((rate, _n, _s),) = parts.rates.values()
    spill.trim()
    return rate.ci95[1] - rate.ci95[0]


@pytest.mark.timeout(300)
def test_no_per_batch_columns_come_back(job, monkeypatch):
    """What a task sends: its rank's sums, rates and op totals, its step rows (a row per step of its main loader,
    six integer columns) and its files' headers; no batch table."""
    import pickle

    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", "2")
    task = rankmap.tasks_of(whole_run(job))[1]
    parts, files, said = rankmap.rank_task(task)
    assert set(parts.sums) == set(parts.main) == set(parts.ops) == {1} and said == []
    ((steps,),) = [parts.steps]
    assert sorted(steps) == sorted(("rank", "epoch", "batch_id", "consumed_ns", "wait_dur_ns", "wait_start_ns"))
    assert len(steps["rank"]) == SPEC["n_batches"] * SPEC["epochs"]
    assert all(f["rank"] == 1 for f in files)
    assert len(files) == len(task.files) == 1 + SPEC["n_workers"] * SPEC["epochs"]  # workers start each epoch
    assert "BatchTable" not in pickle.dumps((parts, files)).decode("latin-1")
