"""Differential tests: lotus's DataLoader yields exactly the batches torch's yields, tracing on or off."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler, SubsetRandomSampler

from lotus.dataloader import DataLoader
from tests.dataloader import datasets as D


def assert_same(a, b, path="batch"):
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert torch.equal(a, b), f"{path}: values differ"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def run(cls, make_kwargs, epochs=2, **extra):
    torch.manual_seed(1234)
    loader = cls(**make_kwargs(), **extra)
    out = []
    for _ in range(epochs):
        out.append(list(loader))
    return out


# name -> factory of DataLoader kwargs (fresh dataset/sampler/generator each call)
CONFIGS = {
    "w0-shuffle": lambda: dict(dataset=D.MapDS(), batch_size=4, shuffle=True,
                               generator=torch.Generator().manual_seed(7)),
    "w0-batch-none": lambda: dict(dataset=D.MapDS(n=9), batch_size=None),
    "w0-sampler": lambda: dict(dataset=D.MapDS(), batch_size=3,
                               sampler=SubsetRandomSampler(list(range(0, 40, 3)),
                                                           generator=torch.Generator().manual_seed(1))),
    "w0-iterable": lambda: dict(dataset=D.RangeIterable(), batch_size=4),
    "w0-dict-collate": lambda: dict(dataset=D.DictDS(), batch_size=4),
    "w2-shuffle": lambda: dict(dataset=D.MapDS(), batch_size=5, shuffle=True, num_workers=2,
                               generator=torch.Generator().manual_seed(3)),
    "w2-drop-last": lambda: dict(dataset=D.MapDS(), batch_size=7, drop_last=True, num_workers=2),
    "w2-batch-sampler": lambda: dict(dataset=D.MapDS(), num_workers=2,
                                     batch_sampler=BatchSampler(SequentialSampler(range(40)), 6, False)),
    "w2-collate-fn": lambda: dict(dataset=D.MapDS(), batch_size=4, num_workers=2, collate_fn=D.sum_collate),
    "w2-batch-none": lambda: dict(dataset=D.MapDS(n=10), batch_size=None, num_workers=2),
    "w2-persistent": lambda: dict(dataset=D.MapDS(), batch_size=4, num_workers=2, persistent_workers=True,
                                  prefetch_factor=3, shuffle=True, generator=torch.Generator().manual_seed(5)),
    "w2-pin-memory": lambda: dict(dataset=D.MapDS(), batch_size=4, num_workers=2, pin_memory=True),
    "w3-dict": lambda: dict(dataset=D.DictDS(), batch_size=4, num_workers=3),
    "w2-iterable": lambda: dict(dataset=D.RangeIterable(), batch_size=4, num_workers=2),
    "w2-iterable-init-fn": lambda: dict(dataset=D.RangeIterable(shard_in_iter=False), batch_size=4,
                                        num_workers=2, worker_init_fn=D.shard_worker_init_fn),
    "w2-distributed": lambda: dict(dataset=D.MapDS(), batch_size=4, num_workers=2,
                                   sampler=DistributedSampler(D.MapDS(), num_replicas=2, rank=1, seed=3)),
    "w2-timeout-init-fn": lambda: dict(dataset=D.MapDS(), batch_size=4, num_workers=2, timeout=60,
                                       worker_init_fn=D.seed_env_worker_init_fn),
    "w1-forkserver": lambda: dict(dataset=D.MapDS(n=12), batch_size=4, num_workers=1,
                                  multiprocessing_context="forkserver"),
    "w2-spawn": lambda: dict(dataset=D.MapDS(n=16), batch_size=4, num_workers=2, multiprocessing_context="spawn",
                             shuffle=True, generator=torch.Generator().manual_seed(9)),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_batches_as_torch(name, tmp_path, recwarn):
    make = CONFIGS[name]
    expected = run(torch.utils.data.DataLoader, make)
    untraced = run(DataLoader, make)
    traced = run(DataLoader, make, trace_dir=tmp_path / "trace")
    assert_same(untraced, expected, "untraced")
    assert_same(traced, expected, "traced")
    assert list((tmp_path / "trace").glob("*.lotustrace")), "tracing on but no trace file written"


@pytest.mark.timeout(60)
def test_out_of_order_delivery_yields_every_batch(tmp_path):
    # in_order=False: which worker prepares which batch depends on timing, so compare sample ids.
    make = lambda: dict(dataset=D.DictDS(n=24), batch_size=3, num_workers=2, in_order=False)  # noqa: E731
    expected = run(torch.utils.data.DataLoader, make, epochs=1)[0]
    traced = run(DataLoader, make, epochs=1, trace_dir=tmp_path)[0]
    ids = lambda batches: sorted(int(i) for b in batches for i in b["id"])  # noqa: E731
    assert ids(traced) == ids(expected) == list(range(24))


@pytest.mark.timeout(60)
def test_env_variable_enables_tracing(tmp_path, monkeypatch):
    monkeypatch.setenv("LOTUS_TRACE_DIR", str(tmp_path / "env"))
    make = CONFIGS["w2-shuffle"]
    expected = run(torch.utils.data.DataLoader, make)
    traced = run(DataLoader, make)
    assert_same(traced, expected)
    assert len(list((tmp_path / "env").glob("*.lotustrace"))) >= 3  # main + 2 workers (x epochs)
