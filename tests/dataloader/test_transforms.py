"""Transform wrapping: names, semantics kept, user objects untouched."""

from __future__ import annotations

import functools

import torch
from torchvision import transforms as T
from torchvision.transforms import v2

from lotus.dataloader.recorder import Recorder
from lotus.dataloader.transforms import TransformSwap, op_name, trace_transform
from lotus.trace.writer import TraceWriter
from tests.dataloader import datasets as D


def _rec(tmp_path):
    return Recorder(TraceWriter(tmp_path, "worker", worker_id=0), 0, 0, None)


def test_names_of_ops():
    assert op_name(T.Normalize([0], [1])) == "Normalize"
    assert op_name(D.double) == "double"
    assert op_name(functools.partial(D.double)) == "double"
    assert op_name(lambda x: x) == "<lambda>"


def test_composes_need_no_stand_in_other_transforms_get_one(tmp_path):
    rec = _rec(tmp_path)
    x = torch.arange(8.0).reshape(1, 2, 4)
    for compose in (T.Compose([T.Normalize([1], [2]), D.double]), v2.Compose([v2.Normalize([1], [2]), D.double])):
        assert trace_transform(compose, rec) is compose  # timed at the class level (lotus.dataloader.compose)
    traced = trace_transform(D.double, rec)
    assert type(traced).__name__ == "TimedPipeline"
    assert torch.equal(traced(x), D.double(x))
    assert rec.nrec == 1  # one op event


def test_swap_installs_only_while_active_and_restores(tmp_path):
    ds = D.DictDS(n=4)  # transform = a plain function
    original = ds.transform
    swap = TransformSwap(ds, _rec(tmp_path))
    with swap:
        assert type(ds.transform).__name__ == "TimedPipeline"
        ds[0]
    assert ds.transform is original


def test_swap_leaves_composes_and_replaced_transforms_alone(tmp_path):
    ds = D.MapDS(n=4)
    original = ds.transform
    with TransformSwap(ds, _rec(tmp_path)):
        assert ds.transform is original  # a Compose: nothing to swap
    plain = D.DictDS(n=4)
    swap = TransformSwap(plain, _rec(tmp_path))
    replacement = functools.partial(D.double)
    plain.transform = replacement  # replaced after the iterator started
    with swap:
        assert plain.transform is replacement
