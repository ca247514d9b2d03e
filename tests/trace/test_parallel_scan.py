"""The scan on several processes (issue 26, item 1): byte-identical outputs to the serial path.

Every command's ``--json`` output with ``LOTUS_JOBS=1`` (the serial path, one part, no merge) and with
2 or 3 processes (the files cut into parts, merged in file order), chunks forced small so that every
part holds many chunks (their per-op floating-point merges replayed in order) and batches are split
over chunks and files; on synthetic multi-rank runs, rotated parts, failed and exhausted fetches, the
study's real traces rewritten as lotus files and a detail-budgeted DataLoader trace.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lotus.query import parallel, scanplan
from lotus.trace import chunks
from lotus.trace.events import load_events
from lotus.trace.parts import part_of
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.cli.conftest import run
from tests.trace.test_scan import REAL, native_from_events

COMMANDS = [("analyze", "stats"), ("analyze", "stats", "--remove-outliers", "--per-rank"), ("analyze", "verdict"),
            ("analyze", "wait"), ("analyze", "gpu"), ("analyze", "throughput"), ("analyze", "ranks"), ("info",)]


def outputs(path, monkeypatch, jobs: int) -> dict:
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", str(jobs))
    out = {}
    for cmd in COMMANDS:
        r = run(*cmd[:2], "-d", path, *cmd[2:], "--json", ok=False)
        assert r.exit_code in (0, 1), r.output  # throughput: 1 when a run has no steady state
        out[cmd] = r.output
    return out


def same_everywhere(path, monkeypatch, chunk: int = 997) -> None:
    monkeypatch.setattr(chunks, "CHUNK_RECORDS", chunk)  # forked processes see it too
    serial = outputs(path, monkeypatch, 1)
    for jobs in (2, 3):
        got = outputs(path, monkeypatch, jobs)
        for cmd in COMMANDS:
            assert got[cmd] == serial[cmd], (jobs, cmd)


@pytest.mark.timeout(300)
def test_multi_rank_nodes_and_epochs(tmp_path, monkeypatch):
    d = tmp_path / "job"
    write_native(d, PipelineSpec(n_batches=60, batch_size=6, n_workers=3, epochs=3, ranks=4, seed=7, sync=True,
                                 slow_rank=1, slow_rank_load=2.5), ranks_per_node=2)
    same_everywhere(d, monkeypatch)


@pytest.mark.timeout(300)
def test_compressed_files(tmp_path, monkeypatch):
    """zstd files (lotus compact's format, written directly by the synthetic writer): the same answers as
    the plain files, on one process or three."""
    spec = PipelineSpec(n_batches=40, batch_size=4, n_workers=2, epochs=2, ranks=3, seed=11)
    write_native(tmp_path / "plain", spec)
    write_native(tmp_path / "zst", spec, compress=True)
    assert all(p.name.endswith(".lotustrace.zst") for p in (tmp_path / "zst").iterdir())
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    for jobs in ("1", "3"):
        monkeypatch.setenv("LOTUS_JOBS", jobs)
        a = run("analyze", "verdict", "-d", tmp_path / "plain", "--json").output
        b = run("analyze", "verdict", "-d", tmp_path / "zst", "--json").output
        assert a.replace('"plain"', '"zst"') == b


@pytest.mark.timeout(300)
@pytest.mark.parametrize("config", ["b128_gpu4", "b512_gpu1"])
def test_real_traces(config, tmp_path, monkeypatch):
    same_everywhere(native_from_events(load_events(REAL / config), tmp_path / config), monkeypatch, chunk=211)


@pytest.mark.timeout(300)
def test_failed_and_exhausted_fetches(tmp_path, monkeypatch):
    from tests.trace.outcome_run import write_outcome_run

    same_everywhere(write_outcome_run(tmp_path / "o", legacy=True), monkeypatch, chunk=5)


@pytest.mark.timeout(300)
def test_rotated_parts_stay_in_one_part(tmp_path, monkeypatch):
    from tests.trace.test_rotation import _items

    d = tmp_path / "rot"
    _items(d, rotate_bytes=64, items=60)  # an item's op records in one part, its sample record in the next
    write_native(d, PipelineSpec(n_batches=20, batch_size=4, n_workers=2, seed=3))
    paths = sorted(d.iterdir())
    for n in (2, 3, 7):
        tasks = parallel.plan(paths, n)
        assert [p for t in tasks for p in t] == paths and 1 < len(tasks) <= n
        owners = [{part_of(p)[0] for p in t} for t in tasks]
        assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1:])
    same_everywhere(d, monkeypatch, chunk=13)


@pytest.mark.detail_budget
@pytest.mark.timeout(300)
def test_detail_budgeted_dataloader_trace(tmp_path, monkeypatch):
    import torch

    from lotus.dataloader import DataLoader
    from lotus.trace.writer import close_main_writers

    monkeypatch.setenv("LOTUS_DETAIL_BUDGET_PCT", "20")
    data = [torch.full((3,), float(i)) for i in range(96)]
    loader = DataLoader(data, batch_size=4, num_workers=2, trace_dir=tmp_path / "t")
    for _ in range(2):
        assert sum(1 for _ in loader) == 24
    close_main_writers()
    same_everywhere(tmp_path / "t", monkeypatch, chunk=31)


def test_jobs_setting(monkeypatch):
    monkeypatch.delenv("LOTUS_JOBS", raising=False)
    assert parallel.jobs(parallel.PARALLEL_MIN_BYTES - 1) == 1
    assert parallel.jobs(parallel.PARALLEL_MIN_BYTES) == parallel.cores()
    monkeypatch.setenv("LOTUS_JOBS", "auto")
    assert parallel.jobs(0) == parallel.cores()
    monkeypatch.setenv("LOTUS_JOBS", "3")
    assert parallel.jobs(0) == 3
    monkeypatch.setenv("LOTUS_JOBS", "many")
    with pytest.raises(Exception, match="LOTUS_JOBS"):
        parallel.jobs(0)


def test_jobs_option_and_bad_value(synth_epochs, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    a = run("analyze", "verdict", "-d", synth_epochs, "--json").output
    b = run("analyze", "verdict", "-d", synth_epochs, "--json", "--jobs", "2").output
    assert a == b
    r = run("analyze", "verdict", "-d", synth_epochs, "--jobs", "-1", ok=False)
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_a_part_failing_in_a_worker_process_is_one_error(synth_epochs, monkeypatch):
    """An error in a forked process (a file unreadable there) reaches the user as it does from the serial
    path: the run skipped with one line naming the file, then (no other run) one error line, exit 1."""
    from lotus.errors import InputError

    real = scanplan.scan_files

    def flaky(paths, ctx):
        if any("-w1-" in p.name for p in paths):
            raise InputError("cannot read this part", paths[0])
        return real(paths, ctx)

    monkeypatch.setattr(scanplan, "scan_files", flaky)  # the forked processes inherit it
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    r = run("analyze", "stats", "-d", synth_epochs, "--jobs", "2", ok=False)
    assert r.exit_code == 1
    assert r.output.splitlines() == [
        f"lotus: warning: {synth_epochs}/lotus-r0-w1-p1002.lotustrace: cannot read this part; run epochs skipped",
        f"lotus: error: {synth_epochs}: no readable run here or below"]


@pytest.fixture
def synth_epochs(tmp_path) -> Path:
    d = tmp_path / "epochs"
    write_native(d, PipelineSpec(n_batches=30, batch_size=4, n_workers=2, epochs=3, seed=2))
    return d
