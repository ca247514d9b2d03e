"""Replay mode (the ingestion-limit probe) and the dataset file list (page-cache control)."""

from __future__ import annotations

import pytest
import torch

from lotus.dataloader import DataLoader
from lotus.query import load_batches
from lotus.trace import load_events
from lotus.trace.writer import close_main_writers
from tests.dataloader import datasets as D


@pytest.fixture(autouse=True)
def _close():
    yield
    close_main_writers()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_replay_hands_out_prepared_batches_without_loading(tmp_path, monkeypatch, workers):
    monkeypatch.setenv("LOTUS_REPLAY", "3")
    ds = D.MapDS(n=40)
    loader = DataLoader(ds, batch_size=4, num_workers=workers, trace_dir=tmp_path)
    for _ in range(2):
        got = list(loader)
    assert len(got) == 10  # the epoch keeps its length
    for i in range(3, 10):
        assert got[i] is got[(i - 3) % 3 + 0] or torch.equal(got[i][0], got[(i - 3) % 3][0])
    batches = load_batches(tmp_path)
    consumed = batches[batches["consumed_ns"].notna()]
    assert len(consumed) == 20 and consumed.groupby("epoch").size().tolist() == [10, 10]
    prepared = consumed[consumed["prep_dur_ns"].notna()]
    assert set(prepared["batch_id"]) == {0, 1, 2}  # only the first 3 of each epoch were loaded
    replayed = consumed[consumed["prep_dur_ns"].isna()]
    assert replayed["buffered"].all() and (replayed["batch_id"] >= 3).all()
    events = load_events(tmp_path)
    desc = next(iter(events.attrs["files"][0]["loaders"].values()))
    assert desc["replay_batches"] == 3
    if workers == 0:
        assert ds.calls == 2 * 3 * 4  # items read: 3 batches of 4, twice


@pytest.mark.timeout(60)
def test_dataset_file_list(tmp_path, monkeypatch):
    from lotus.dataloader.datafiles import dataset_files

    files = []
    for i in range(3):
        f = tmp_path / f"img{i}.bin"
        f.write_bytes(b"x" * 10)
        files.append(str(f))

    class Folderish(torch.utils.data.Dataset):
        def __init__(self):
            self.samples = [(p, 0) for p in files]

        def __len__(self):
            return 3

        def __getitem__(self, i):
            return i

    assert dataset_files(torch.utils.data.Subset(Folderish(), [0, 1])) == files
    assert dataset_files(D.MapDS()) == []
    monkeypatch.setenv("LOTUS_DATASET_FILES", "1")
    out = tmp_path / "trace"
    list(DataLoader(Folderish(), batch_size=2, trace_dir=out))
    (listed,) = out.glob("lotus-dataset-r0-l*.files")
    assert listed.read_text().split() == files
