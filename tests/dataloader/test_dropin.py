"""Drop-in regressions found by running PyTorch's own test/test_dataloader.py with lotus patched in.

(The suite itself is run by scripts/torch_dataloader_suite.py; see docs/compatibility.md.)

* ``test_typing``: torch's DataLoader is generic (``DataLoader[T_co]``); lotus's must be too, or an
  annotation such as ``-> DataLoader[List[Tensor]]`` raises TypeError when the module is imported.
* ``test_multiprocessing_iterdatapipe`` (traced): the worker's instrumented copy of an IterDataPipe
  must pickle (torch walks the pipe graph with a pickler in every worker) and must register one
  iterator per ``iter()`` (the DataPipe single-iterator rule).
"""

from __future__ import annotations

import copy
import pickle
import typing

import pytest
import torch
import torch.utils.data
from torch.utils.data import Dataset, IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

from lotus.dataloader import DataLoader
from lotus.dataloader.traced_class import make_faithful
from lotus.trace import load_events
from lotus.trace.writer import close_main_writers

# -- DataLoader is generic ----------------------------------------------------------------------


def test_dataloader_subscription_like_torch():
    alias = DataLoader[int]
    assert typing.get_origin(alias) is DataLoader and typing.get_args(alias) == (int,)
    assert len(DataLoader.__parameters__) == len(torch.utils.data.DataLoader.__parameters__) == 1
    assert issubclass(DataLoader, torch.utils.data.DataLoader)

    def make(is_train: bool) -> DataLoader[typing.List[torch.Tensor]]:  # noqa: UP006 - as torch's test writes it
        raise NotImplementedError

    assert typing.get_type_hints(make)["return"] == DataLoader[typing.List[torch.Tensor]]  # noqa: UP006
    # an instance made through the alias is an ordinary loader
    assert [b.tolist() for b in DataLoader[int](list(range(5)), batch_size=2)] == [[0, 1], [2, 3], [4]]


def test_patched_torch_dataloader_is_generic():
    from lotus.launch.hook import patch_torch, unpatch_torch

    try:
        assert patch_torch()
        assert torch.utils.data.DataLoader is DataLoader
        ns: dict = {}
        exec("from typing import List\nimport torch\nfrom torch.utils.data import DataLoader\n"
             "def f(is_train: bool) -> DataLoader[List[torch.Tensor]]: pass\n", ns)
        assert typing.get_type_hints(ns["f"])["return"].__origin__ is DataLoader
    finally:
        unpatch_torch()


# -- the worker's traced dataset class pickles, copies and iterates as the user's ---------------


class _MapDS(Dataset):
    def __init__(self, n=4):
        self.n = n

    def __getitem__(self, i):
        return i * 10

    def __len__(self):
        return self.n


class _ReducingDS(_MapDS):
    def __reduce__(self):
        return (_ReducingDS, (self.n + 100,))


class _Pipe(IterDataPipe):
    def __init__(self, n=5):
        self.n = n

    def __iter__(self):
        yield from range(self.n)


def _traced_like_lotus(cls, ns):
    """A subclass built the way lotus builds its worker class: same name, module and qualname."""
    body = {"__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__, **ns}
    sub = type(cls)(cls.__name__, (cls,), body)
    make_faithful(sub, cls)
    return sub


@pytest.mark.parametrize("protocol", [0, 1, 2, pickle.HIGHEST_PROTOCOL])
def test_traced_instance_pickles_as_the_users_class(protocol):
    ds = _MapDS(7)
    sub = _traced_like_lotus(_MapDS, {"__getitem__": lambda self, i: -1})
    ds.__class__ = sub
    back = pickle.loads(pickle.dumps(ds, protocol=protocol))
    assert type(back) is _MapDS and back.n == 7 and back[2] == 20
    assert type(ds) is sub  # the worker's own copy stays traced
    for c in (copy.copy(ds), copy.deepcopy(ds)):
        assert type(c) is _MapDS and c.n == 7


def test_users_own_reduce_is_kept():
    ds = _ReducingDS(1)
    ds.__class__ = _traced_like_lotus(_ReducingDS, {})
    back = pickle.loads(pickle.dumps(ds))
    assert type(back) is _ReducingDS and back.n == 101


def test_traced_datapipe_has_one_iterator_per_iter():
    pipe = _Pipe(5)
    seen = []

    def __iter__(self):
        for x in super(sub, self).__iter__():
            seen.append(x)
            yield x

    sub = _traced_like_lotus(_Pipe, {"__iter__": __iter__})
    pipe.__class__ = sub
    assert list(pipe) == list(range(5)) and seen == list(range(5))
    assert list(pipe) == list(range(5))  # a second epoch: a fresh iterator, no "invalidated" error
    back = pickle.loads(pickle.dumps(pipe))
    assert type(back) is _Pipe and list(back) == list(range(5))


# -- through the DataLoader: batches equal torch's, tracing still records the workers -----------


def plus_one(x):
    return x + 1


def is_even(x):
    return x % 2 == 0


def _pipe():
    return IterableWrapper(range(40)).map(plus_one).filter(is_even).shuffle().sharding_filter()


def _batches(cls, epochs=1, **kw):
    torch.manual_seed(0)
    loader = cls(_pipe(), batch_size=3, **kw)
    out = [[b.tolist() for b in loader] for _ in range(epochs)]
    del loader
    return out


def _check_traced(tmp_path, epochs=1, **kw):
    expected = _batches(torch.utils.data.DataLoader, epochs, **kw)
    got = _batches(DataLoader, epochs, trace_dir=tmp_path, **kw)
    close_main_writers()
    assert got == expected and sum(len(e) for e in expected) > 0
    events = load_events(tmp_path)
    return events


@pytest.mark.timeout(120)
def test_iterdatapipe_traced_spawn_two_workers(tmp_path):
    events = _check_traced(tmp_path, num_workers=2, multiprocessing_context="spawn")
    samples = events[(events["name"] == "sample") & (events["role"] == "worker")]
    assert set(samples["worker_id"]) == {0, 1}  # per-sample timing still on in the workers
    assert len(samples) == 20


@pytest.mark.timeout(120)
def test_iterdatapipe_traced_fork_persistent_shuffled(tmp_path):
    # persistent workers re-seed the pipe (pickling it again) at each new epoch
    events = _check_traced(tmp_path, epochs=2, num_workers=2, multiprocessing_context="fork",
                           persistent_workers=True, shuffle=True)
    assert (events["name"] == "sample").sum() == 40


@pytest.mark.timeout(60)
def test_iterdatapipe_traced_main_process(tmp_path):
    events = _check_traced(tmp_path, epochs=2, shuffle=True)
    assert (events["name"] == "sample").sum() == 40
