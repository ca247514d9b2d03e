"""DataLoader(num_workers="auto"): the count of each epoch from the model fitted on the trace so far."""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from torch.utils.data import Dataset

from lotus.dataloader import DataLoader
from lotus.dataloader.auto import choose, first_count
from lotus.trace import load_events
from lotus.trace.writer import close_main_writers
from tests.dataloader import datasets as D


class Busy(Dataset):
    """Deterministic items costing 4 ms of CPU each."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        end = time.perf_counter() + 0.004
        while time.perf_counter() < end:
            pass
        return torch.tensor([i])


@pytest.fixture(autouse=True)
def _close():
    yield
    close_main_writers()


def test_choice_rule():
    assert choose({0: 100, 1: 200, 2: 390, 3: 400, 4: 401}, current=1)[0] == 3  # fewest within 2% of the best
    assert choose({0: 100, 1: 200, 2: 390, 3: 400}, current=2)[0] == 2  # within 5%: no switch
    assert choose({0: None, 1: None}, current=1) == (1, "no prediction: the model could not rate any count")
    assert first_count(1) == 1 and first_count(16) == 8


@pytest.mark.timeout(120)
@pytest.mark.parametrize("persistent", [False, True])
def test_auto_changes_the_count_and_keeps_the_batches(tmp_path, persistent):
    kw = dict(batch_size=8, shuffle=True, persistent_workers=persistent)
    auto = DataLoader(Busy(), num_workers="auto", generator=torch.Generator().manual_seed(3), trace_dir=tmp_path, **kw)
    fixed = torch.utils.data.DataLoader(Busy(), num_workers=1, generator=torch.Generator().manual_seed(3), **kw)
    counts = []
    for _ in range(3):
        got = [b.tolist() for b in auto]
        assert got == [b.tolist() for b in fixed]  # same samples, same batches, same order
        counts.append(auto.num_workers)
    assert counts[0] == first_count()
    sets = load_events(tmp_path).query("name == 'workers_set'")
    assert list(sets["epoch"]) == [1, 2] and list(sets["arg"]) == counts[1:]
    assert [h[1] for h in auto._lotus_auto.history] == counts[1:]


@pytest.mark.timeout(60)
def test_auto_without_tracing_or_with_iterable_data_keeps_its_count(tmp_path, monkeypatch):
    import lotus._warn

    lotus._warn.reset_for_tests()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        untraced = DataLoader(Busy(), batch_size=8, num_workers="auto")
        for _ in range(2):
            list(untraced)
        it = DataLoader(D.RangeIterable(end=16), batch_size=4, num_workers="auto", trace_dir=tmp_path)
        for _ in range(2):
            assert sum(len(b) for b in it) == 16
    text = " ".join(str(w.message) for w in caught)
    assert "needs tracing" in text and "IterableDataset" in text
    assert untraced.num_workers == first_count()
    monkeypatch.setenv("LOTUS_WORKERS", "0")
    assert DataLoader(Busy(), batch_size=8, num_workers="auto")._lotus_auto is None  # lotus run --workers wins
