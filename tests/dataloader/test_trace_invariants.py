"""Invariants of the traces the DataLoader writes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler

from lotus.dataloader import DataLoader
from lotus.query import batches_from_events
from lotus.trace import load_events
from tests.dataloader import datasets as D

OPS = {"RandomHorizontalFlip", "AddNoise", "Normalize", "double"}


def traced(tmp_path, epochs=2, **kwargs):
    loader = DataLoader(trace_dir=tmp_path, **kwargs)
    out = [list(loader) for _ in range(epochs)]
    del loader
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    events = load_events(tmp_path)
    return out, events, batches_from_events(events)


CASES = {
    "w0": dict(dataset=D.MapDS(n=20), batch_size=4),
    "w2": dict(dataset=D.MapDS(n=20), batch_size=4, num_workers=2),
    "w2-persistent": dict(dataset=D.MapDS(n=20), batch_size=4, num_workers=2, persistent_workers=True),
    "w2-shuffle": dict(dataset=D.MapDS(n=20), batch_size=4, num_workers=2, shuffle=True),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_batch_invariants(case, tmp_path):
    out, events, batches = traced(tmp_path, **CASES[case])
    n_batches = len(out[0])
    consumed = batches[batches["consumed_ns"].notna()]
    # every consumed batch, in both epochs, has its preprocessing record
    assert len(consumed) == 2 * n_batches
    assert consumed["prep_dur_ns"].notna().all()
    assert sorted(consumed["epoch"].unique()) == [0, 1]
    for _, g in consumed.groupby("epoch"):
        assert sorted(g["batch_id"]) == list(range(n_batches))
    # time order: dispatched <= prep start <= prep end <= arrival <= consumed; wait ends at consumption
    c = consumed.astype({k: "int64" for k in ("prep_start_ns", "prep_end_ns", "wait_start_ns", "consumed_ns")})
    assert (c["prep_start_ns"] <= c["prep_end_ns"]).all()
    assert (c["prep_end_ns"] <= c["consumed_ns"]).all()
    assert (c["wait_start_ns"] <= c["consumed_ns"]).all()
    assert (consumed["wait_start_ns"] + consumed["wait_dur_ns"] == consumed["consumed_ns"]).all()
    if CASES[case].get("num_workers", 0):
        assert (c["prep_end_ns"] <= consumed["arrive_ns"].astype("int64")).all()
        assert (consumed["arrive_ns"] <= consumed["consumed_ns"]).all()
        assert (consumed["dispatch_ns"] <= consumed["prep_start_ns"]).all()
        assert (consumed["dispatch_worker"] == consumed["worker_id"]).all()
        assert set(consumed["worker_id"]) == {0, 1}
    else:
        assert set(consumed["worker_id"]) == {-1}
        # dispatch, collation and fetch come in one append: the dispatch ends where the fetch starts, and
        # the fetch ends where its collation ends (no pinning here)
        disp = events[events["name"] == "dispatch"].set_index(["epoch", "batch_id"])
        col = events[events["name"] == "collate"].set_index(["epoch", "batch_id"])
        fetch = events[events["name"] == "fetch"].set_index(["epoch", "batch_id"]).reindex(col.index)
        assert len(col) == 2 * n_batches and (col["arg"] == 4).all()
        disp = disp.reindex(col.index)
        assert (disp["start_ns"] + disp["dur_ns"] == fetch["start_ns"]).all()
        assert (col["start_ns"] >= fetch["start_ns"]).all()
        assert (col["start_ns"] + col["dur_ns"] == fetch["start_ns"] + fetch["dur_ns"]).all()
    assert (consumed["collate_dur_ns"] > 0).all()  # every batch's collation, in workers too
    assert (consumed["n_samples"] == 4).all()
    # per-op and per-sample sums stay within the batch's preprocessing time
    per_batch = events[events["batch_id"] >= 0]
    key = ["rank", "loader", "epoch", "batch_id"]
    prep = consumed.set_index(key)["prep_dur_ns"].astype("int64")
    for cat in ("op", "sample"):
        sub = per_batch[per_batch["cat"] == cat]
        for name, g in sub.groupby("name", observed=True):
            sums = g.groupby(key)["dur_ns"].sum()
            assert (sums <= prep.reindex(sums.index)).all(), f"{name} exceeds batch prep"
    assert set(events.loc[events["cat"] == "op", "name"].astype(str)) == OPS
    # each sample: load + transform <= sample, ops within transform
    s = events[events["name"].isin(["sample", "load", "transform"])].pivot_table(
        index=[*key, "sample"], columns="name", values="dur_ns", aggfunc="sum", observed=True)
    assert len(s) == 2 * 20
    assert (s["load"] + s["transform"] <= s["sample"]).all()
    ops = events[events["cat"] == "op"].groupby([*key, "sample"])["dur_ns"].sum()
    assert (ops <= s["transform"].reindex(ops.index)).all()
    # every file closed cleanly
    assert all(f["clean_close"] for f in events.attrs["files"])


@pytest.mark.timeout(60)
def test_sample_indices_follow_the_sampler(tmp_path):
    _, events, _ = traced(tmp_path, epochs=1, dataset=D.MapDS(n=12), batch_size=4, num_workers=2,
                          sampler=SequentialSampler(range(12)))
    samples = events[events["name"] == "sample"].sort_values(["batch_id", "start_ns"])
    for b, g in samples.groupby("batch_id"):
        assert list(g["sample"]) == list(range(4 * b, 4 * b + 4))


@pytest.mark.timeout(60)
def test_persistent_workers_keep_their_files_across_epochs(tmp_path):
    _, events, _ = traced(tmp_path, epochs=3, dataset=D.MapDS(n=8), batch_size=4, num_workers=2,
                          persistent_workers=True)
    workers = [f for f in events.attrs["files"] if f["role"] == "worker"]
    assert len(workers) == 2
    fetch = events[events["name"] == "fetch"]
    assert sorted(fetch["epoch"].unique()) == [0, 1, 2]


@pytest.mark.timeout(60)
def test_iterable_dataset_events(tmp_path):
    out, events, batches = traced(tmp_path, epochs=1, dataset=D.RangeIterable(end=20), batch_size=4,
                                  num_workers=2)
    consumed = batches[batches["consumed_ns"].notna()]
    assert len(consumed) == len(out[0]) == 6  # 10 items per worker: 3 batches each (4, 4, 2)
    assert len(batches) == 6  # exhausted fetches and prefetched-past-the-end indices are no batch rows
    exhausted = events[events["name"] == "exhausted"]
    assert sorted(exhausted["worker_id"]) == [0, 1]  # each worker reports its exhaustion once
    assert (events[events["name"] == "fetch"]["arg"] & 2).sum() == 0
    assert events[events["name"] == "sample"].shape[0] == 20


@pytest.mark.timeout(60)
def test_iterable_dataset_exhausted_in_process(tmp_path):
    out, events, batches = traced(tmp_path, epochs=1, dataset=D.RangeIterable(end=10), batch_size=4,
                                  num_workers=0)
    assert len(out[0]) == len(batches) == 3
    exhausted = events[events["name"] == "exhausted"]
    assert len(exhausted) == 1 and int(exhausted["worker_id"].iloc[0]) == -1
    assert batches.attrs.get("dispatched_without_batch", 0) == 0


@pytest.mark.timeout(60)
def test_two_loaders_in_one_process_are_told_apart(tmp_path):
    a = DataLoader(D.MapDS(n=8), batch_size=4, trace_dir=tmp_path, trace_name="train")
    b = DataLoader(D.MapDS(n=12), batch_size=4, num_workers=1, trace_dir=tmp_path, trace_name="val")
    list(a), list(b), list(a)
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    batches = batches_from_events(load_events(tmp_path))
    counts = batches[batches["consumed_ns"].notna()].groupby(["loader", "epoch"]).size()
    assert sorted(counts.tolist()) == [2, 2, 3]
    names = {d.get("name") for f in load_events(tmp_path).attrs["files"] for d in f.get("loaders", {}).values()}
    assert names == {"train", "val"}


@pytest.mark.timeout(60)
def test_itt_tasks_balance(tmp_path, monkeypatch):
    from lotus.dataloader import recorder

    calls = []

    class FakeItt:
        def handle(self, name):
            return name

        def begin(self, handle):
            calls.append(("b", handle))

        def end(self):
            calls.append(("e", None))

    monkeypatch.setattr(recorder, "make_itt", lambda enabled: FakeItt() if enabled else None)
    from lotus.dataloader import loadertrace as loader_mod

    monkeypatch.setattr(loader_mod, "make_itt", lambda enabled: FakeItt() if enabled else None)
    list(DataLoader(D.MapDS(n=8), batch_size=4, trace_dir=tmp_path, itt=True))
    depth = 0
    for kind, _ in calls:
        depth += 1 if kind == "b" else -1
        assert depth >= 0
    assert depth == 0
    begun = [h for k, h in calls if k == "b"]
    assert begun.count("Batch") == 2 and begun.count("Loader") == 8 and begun.count("Collation") == 2
    assert set(begun) == {"Batch", "Loader", "Collation", *OPS}


@pytest.mark.timeout(60)
def test_no_ittapi_import_without_itt(tmp_path):
    code = (
        "import sys, torch\n"
        "from lotus.dataloader import DataLoader\n"
        "from tests.dataloader.datasets import MapDS\n"
        f"list(DataLoader(MapDS(n=8), batch_size=4, trace_dir={str(tmp_path)!r}))\n"
        "assert 'ittapi' not in sys.modules, 'ittapi imported'\n"
        f"list(DataLoader(MapDS(n=8), batch_size=4, trace_dir={str(tmp_path)!r}, itt=True))\n"
        "assert 'ittapi' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_tracing_off_writes_nothing_and_is_torch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loader = DataLoader(D.MapDS(n=8), batch_size=4, num_workers=0)
    assert loader.trace_dir is None
    it = iter(loader)
    assert type(it).__module__.startswith("torch.")
    assert not list(tmp_path.iterdir())
    assert isinstance(loader, torch.utils.data.DataLoader)


def test_ops_of_nested_datasets_are_found(tmp_path):
    from torch.utils.data import ConcatDataset, Subset

    ds = ConcatDataset([Subset(D.MapDS(n=10), [1, 3, 5, 7]), D.MapDS(n=4)])
    _, events, _ = traced(tmp_path, epochs=1, dataset=ds, batch_size=4)
    assert set(events.loc[events["cat"] == "op", "name"].astype(str)) == OPS
    samples = events[events["name"] == "sample"]
    assert len(samples) == 8
    assert np.array_equal(np.sort(samples["sample"].to_numpy()), np.arange(8))


class _ClassAttrDS(D.MapDS):
    from torchvision import transforms as _T

    transform = _T.Compose([D.AddNoise(), D.double])

    def __init__(self, n=8):
        super().__init__(n=n)
        del self.transform  # use the class attribute


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1])
def test_transform_as_class_attribute(workers, tmp_path):
    ds = _ClassAttrDS()
    assert "transform" not in vars(ds)
    _, events, _ = traced(tmp_path, epochs=1, dataset=ds, batch_size=4, num_workers=workers)
    assert set(events.loc[events["cat"] == "op", "name"].astype(str)) == {"AddNoise", "double"}
    assert "transform" not in vars(ds)  # the user's object is left as it was


def test_lotus_step_marks_explicit_steps(tmp_path):
    import lotus

    with lotus.step():  # no traced loader yet: a no-op
        pass
    loader = DataLoader(D.MapDS(n=12), batch_size=4, trace_dir=tmp_path)
    for _ in loader:
        with lotus.step():
            torch.ones(8).sum()
    del loader
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    events = load_events(tmp_path)
    steps = events[events["name"] == "user_step"]
    assert sorted(steps["batch_id"]) == [0, 1, 2]
    consumed = events[events["name"] == "consumed"].set_index("batch_id")["start_ns"]
    assert (steps.set_index("batch_id")["start_ns"] >= consumed.reindex(steps["batch_id"]).to_numpy()).all()


def test_the_active_loader_is_forgotten_when_collected():
    """lotus.step() finds the loader that last handed out a batch by a weak reference; the per-batch check
    compares ids, so a collected loader's id must not stay 'active' (a new one may reuse the id)."""
    import gc

    from lotus.dataloader import gpu

    class Trace:  # stands in for a LoaderTrace
        pass

    lt = Trace()
    gpu.set_active(lt)
    assert gpu._active_id == id(lt) and gpu._active() is lt
    del lt
    gc.collect()
    assert gpu._active_id == 0 and gpu._active is None
