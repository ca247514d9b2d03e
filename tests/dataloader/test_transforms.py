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


def test_compose_v1_and_v2_keep_their_results_and_get_unique_names(tmp_path):
    rec = _rec(tmp_path)
    x = torch.arange(8.0).reshape(1, 2, 4)
    for compose in (T.Compose([T.Normalize([1], [2]), T.Normalize([1], [2]), D.double]),
                    v2.Compose([v2.Normalize([1], [2]), v2.Normalize([1], [2]), D.double])):
        traced = trace_transform(compose, rec)
        assert [op.name for op in traced.inner.transforms] == ["Normalize", "Normalize#2", "double"]
        assert torch.equal(traced(x), compose(x))
        assert traced.transforms is compose.transforms  # attribute reads reach the user's object
        assert not any(type(t).__name__ == "TimedOp" for t in compose.transforms)  # left untouched


def test_swap_installs_only_while_active_and_restores(tmp_path):
    ds = D.MapDS(n=4)
    original = ds.transform
    swap = TransformSwap(ds, _rec(tmp_path))
    with swap:
        assert type(ds.transform).__name__ == "TimedPipeline"
        ds[0]
    assert ds.transform is original
