"""Errors surface exactly as in torch; tracer failures never reach the training loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch

from lotus._warn import LotusTraceWarning, reset_for_tests
from lotus.dataloader import DataLoader
from lotus.query import load_batches
from lotus.trace import load_events
from tests.dataloader import datasets as D
from tests.dataloader.test_differential import assert_same


@pytest.fixture(autouse=True)
def _fresh_warnings():
    reset_for_tests()
    yield
    reset_for_tests()


def _raised(cls, **kwargs):
    with pytest.raises(Exception) as info:
        for _ in cls(**kwargs):
            pass
    exc = info.value
    exc.__traceback__ = None  # drop the frames holding the iterator, so its workers stop now
    del info
    import gc

    gc.collect()
    return exc


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_worker_exception_surfaces_like_torch(workers, tmp_path):
    kwargs = dict(dataset=D.MapDS(n=12, fail_at=5), batch_size=4, num_workers=workers)
    ref = _raised(torch.utils.data.DataLoader, **kwargs)
    got = _raised(DataLoader, trace_dir=tmp_path, **kwargs)
    assert type(got) is type(ref) is ValueError
    # Same message; in workers torch embeds the worker traceback, which also shows lotus's wrapper frames.
    ref_lines, got_lines = str(ref).strip().splitlines(), str(got).strip().splitlines()
    assert got_lines[0] == ref_lines[0] and got_lines[-1] == ref_lines[-1]
    assert [ln for ln in ref_lines if "datasets.py" in ln] == [ln for ln in got_lines if "datasets.py" in ln]
    if workers:
        batches = load_batches(tmp_path)
        assert batches["failed"].sum() == 1
        assert int(batches.loc[batches["failed"], "batch_id"].iloc[0]) == 1


@pytest.mark.timeout(60)
def test_timeout_surfaces_like_torch(tmp_path):
    kwargs = dict(dataset=D.SlowDS(n=2, sleep_s=1.0), batch_size=2, num_workers=1, timeout=0.3)
    ref = _raised(torch.utils.data.DataLoader, **kwargs)
    got = _raised(DataLoader, trace_dir=tmp_path, **kwargs)
    assert type(got) is type(ref) is RuntimeError
    assert str(got) == str(ref)


def test_unknown_keyword_is_a_type_error_like_torch():
    with pytest.raises(TypeError) as ref:
        torch.utils.data.DataLoader(D.MapDS(), batch_sizee=4)
    with pytest.raises(TypeError) as got:
        DataLoader(D.MapDS(), batch_sizee=4)
    assert str(got.value) == str(ref.value)


def test_bad_arguments_raise_like_torch():
    for kwargs in (dict(num_workers=-1), dict(persistent_workers=True), dict(prefetch_factor=2),
                   dict(shuffle=True, sampler=[0, 1])):
        with pytest.raises(ValueError) as ref:
            torch.utils.data.DataLoader(D.MapDS(), **kwargs)
        with pytest.raises(ValueError) as got:
            DataLoader(D.MapDS(), trace_dir="/tmp/unused-lotus", **kwargs)
        assert str(got.value) == str(ref.value)


def test_signature_is_torch_plus_lotus_keywords():
    import inspect

    torch_params = list(inspect.signature(torch.utils.data.DataLoader.__init__).parameters)
    ours = list(inspect.signature(DataLoader.__init__).parameters)
    assert ours[: len(torch_params)] == torch_params
    assert ours[len(torch_params):] == ["trace_dir", "itt", "trace_name", "worker_assignment", "delivery_order",
                                       "gpu_telemetry", "trace_detail", "trace_budget_pct", "live_sinks"]


def test_user_multiprocessing_context_is_kept(tmp_path):
    loader = DataLoader(D.MapDS(), num_workers=1, multiprocessing_context="spawn", trace_dir=tmp_path)
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert type(loader.multiprocessing_context).__module__ == "multiprocessing.context"
    assert DataLoader(D.MapDS(), num_workers=1, trace_dir=tmp_path).multiprocessing_context is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_trace_dir_that_is_a_file_warns_and_training_goes_on(workers, tmp_path):
    bad = tmp_path / "not-a-dir"
    bad.write_text("x")
    kwargs = dict(dataset=D.MapDS(n=12), batch_size=4, num_workers=workers)
    torch.manual_seed(0)
    expected = list(torch.utils.data.DataLoader(**kwargs))
    torch.manual_seed(0)
    with pytest.warns(LotusTraceWarning, match="tracing disabled"):
        loader = DataLoader(trace_dir=bad, **kwargs)
        got = list(loader)
    assert_same(got, expected)
    assert loader.trace_dir is None  # off for this loader


@pytest.mark.timeout(60)
def test_unwritable_trace_dir_warns(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(DataLoader(D.MapDS(n=8), batch_size=4, trace_dir="/proc/lotus-cannot-write"))
    assert len(got) == 2
    assert any(issubclass(w.category, LotusTraceWarning) for w in caught)


@pytest.mark.timeout(60)
def test_disk_full_mid_run_warns_once_and_training_goes_on(tmp_path):
    loader = DataLoader(D.MapDS(n=40), batch_size=2, trace_dir=tmp_path)
    writer = loader._lotus.w
    torch.manual_seed(0)
    expected = list(torch.utils.data.DataLoader(D.MapDS(n=40), batch_size=2))
    torch.manual_seed(0)
    got = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, batch in enumerate(loader):
            got.append(batch)
            if i == 3:
                writer._file.close()
                writer._file = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 - ENOSPC on write
                writer.flush_bytes = 1
    assert_same(got, expected)
    lotus_warnings = [w for w in caught if issubclass(w.category, LotusTraceWarning)]
    assert len(lotus_warnings) == 1
    assert len(writer.buf) == 0  # nothing accumulates once disabled


@pytest.mark.timeout(90)
def test_sigkill_of_a_worker_surfaces_like_torch_and_trace_is_salvaged(tmp_path):
    def kill_second_worker(cls, **extra):
        loader = cls(D.MapDS(n=64, sleep_s=0.05), batch_size=4, num_workers=2, **extra)
        it = iter(loader)
        next(it), next(it)  # batch 1 comes from worker 1: it has finished one batch
        pid = it._workers[1].pid
        with pytest.raises(RuntimeError) as info:  # torch's SIGCHLD handler may raise at any point
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            for _ in it:
                pass
        return str(info.value).replace(str(pid), "PID")

    assert kill_second_worker(DataLoader, trace_dir=tmp_path) == kill_second_worker(torch.utils.data.DataLoader)
    import gc

    gc.collect()  # the iterators (held by exception tracebacks) shut their surviving workers down
    from lotus.trace.writer import close_main_writers

    close_main_writers()  # as at the end of the training process
    events = load_events(tmp_path)
    files = events.attrs["files"]
    workers = [f for f in files if f["role"] == "worker"]
    assert len(workers) == 2
    # The killed worker's file has no end record; the survivor either leaves its loop when torch shuts it
    # down (end record) or is SIGTERMed by torch first (its C handler _exits at once: none), depending on
    # timing. Each worker flushed after every batch it finished, so only a batch in progress can be missing.
    assert sum(not f["clean_close"] for f in workers) >= 1
    for f in workers:
        fetch = events[(events["name"] == "fetch") & (events["pid"] == f["pid"])]
        samples = events[(events["name"] == "sample") & (events["pid"] == f["pid"])]
        assert len(fetch) >= 1
        assert set(samples["batch_id"]) <= set(fetch["batch_id"])
        assert len(samples) == 4 * len(fetch)
    batches = load_batches(tmp_path)
    assert set(batches.loc[batches["consumed_ns"].notna(), "batch_id"]) == {0, 1}
    assert batches.loc[batches["consumed_ns"].notna(), "prep_dur_ns"].notna().all()


@pytest.mark.timeout(90)
def test_killed_main_process_leaves_a_readable_trace(tmp_path):
    script = (
        "import os, signal, sys\n"
        "from lotus.dataloader import DataLoader\n"
        "from tests.dataloader.datasets import MapDS\n"
        f"loader = DataLoader(MapDS(n=400), batch_size=4, num_workers=2, trace_dir={str(tmp_path)!r})\n"
        "for i, _ in enumerate(loader):\n"
        "    if i == 30:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], timeout=60, cwd=os.getcwd(), check=False)
    assert proc.returncode == -signal.SIGKILL
    time.sleep(1.0)  # orphaned workers notice the dead parent and exit
    events = load_events(tmp_path)
    assert (events["name"] == "fetch").sum() >= 10
    main = [f for f in events.attrs["files"] if f["role"] == "main"]
    assert len(main) == 1 and not main[0]["clean_close"]
