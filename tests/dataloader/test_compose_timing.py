"""Every torchvision Compose is timed, wherever the user keeps it (issue 8, item 3)."""

from __future__ import annotations

import threading

import pytest
import torch
from torchvision import transforms as T
from torchvision.transforms import v2

from lotus.dataloader import DataLoader
from lotus.dataloader import compose as C
from lotus.dataloader.recorder import Recorder
from lotus.trace import load_events
from lotus.trace.writer import TraceWriter, close_main_writers
from tests.dataloader import compose_datasets as CD


def _rec(tmp_path):
    return Recorder(TraceWriter(tmp_path, "worker", worker_id=0), 0, 0, None)


def _ops(events):
    return events[events["cat"] == "op"]


# -- the timed loop is the Compose loop: same results (canary for a torchvision that changes Compose) --
@pytest.mark.parametrize("make", [
    lambda: T.Compose([T.Normalize([1], [2]), CD.double, T.Lambda(torch.flatten)]),
    lambda: T.Compose([]),
    lambda: v2.Compose([v2.Normalize([1], [2]), v2.Lambda(CD.double)]),
    lambda: T.Compose([T.Compose([CD.double]), CD.CallsCompose()]),
])
def test_timed_compose_returns_what_torchvision_returns(tmp_path, make):
    compose, x = make(), torch.arange(8.0).reshape(1, 2, 4)
    expected = compose(x)
    rec = _rec(tmp_path)
    with C.ComposeWindow(rec):
        got = compose(x)
    assert torch.equal(got, expected)
    assert rec.depth == 0


def test_v2_several_inputs_and_dicts_unpack_like_torchvision(tmp_path):
    joint = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Lambda(lambda a: a)])
    img, mask = torch.arange(8.0).reshape(1, 2, 4), torch.ones(1, 2, 4, dtype=torch.bool)
    expected = joint(img, mask)
    sample = {"image": img, "label": 3}
    expected_dict = joint(sample)
    rec = _rec(tmp_path)
    with C.ComposeWindow(rec):
        got = joint(img, mask)
        got_dict = joint(sample)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert torch.equal(got_dict["image"], expected_dict["image"]) and got_dict["label"] == 3
    assert rec.nrec == 4  # two ops, two calls


def test_error_in_an_op_propagates_and_leaves_state_clean(tmp_path):
    def boom(x):
        raise ValueError("user error")

    rec = _rec(tmp_path)
    with C.ComposeWindow(rec), pytest.raises(ValueError, match="user error"):
        T.Compose([CD.double, boom])(torch.zeros(1))
    assert rec.depth == 0
    assert T.Compose.__call__ is C._ORIG_V1


def test_window_restores_classes_and_ignores_other_threads(tmp_path):
    orig_v1, orig_v2 = T.Compose.__call__, v2.Compose.forward
    rec = _rec(tmp_path)
    compose = T.Compose([CD.double])
    with C.ComposeWindow(rec):
        assert T.Compose.__call__ is not orig_v1
        t = threading.Thread(target=compose, args=(torch.zeros(1),))
        t.start()
        t.join()
        assert rec.nrec == 0  # another thread's call is not this window's
        with C.ComposeWindow(rec):  # nested window (a num_workers=0 loader inside another's fetch)
            compose(torch.zeros(1))
        assert T.Compose.__call__ is not orig_v1
        compose(torch.zeros(1))
    assert T.Compose.__call__ is orig_v1 and v2.Compose.forward is orig_v2
    assert rec.nrec == 2
    compose(torch.zeros(1))
    assert rec.nrec == 2  # nothing is timed outside a window


def test_op_names_unique_per_compose_and_nested_time_attributed_once(tmp_path):
    rec = _rec(tmp_path)
    ds = CD.NestedDS()
    with C.ComposeWindow(rec):
        ds[0]
    rec.w.flush()
    rec.w.close()
    ops = _ops(load_events(tmp_path))
    # inner Compose's ops, CallsCompose's inner ops, then plus_one; never "Compose" or "CallsCompose"
    assert list(ops["name"]) == ["Normalize", "double", "plus_one", "double", "plus_one"]
    durs = ops["dur_ns"].to_numpy()
    assert (durs >= 0).all()


# -- end to end through the DataLoader: no attribute named transform anywhere ------------------------
def _traced(tmp_path, ds, **kw):
    loader = DataLoader(ds, batch_size=4, trace_dir=tmp_path, **kw)
    out = list(loader)
    del loader
    close_main_writers()
    return out, load_events(tmp_path)


def _hf():
    ds = CD.HFStyleDS()
    ds.set_transform(CD.HFTransform())
    return ds


DATASETS = {
    "attr": (CD.AttrDS, CD.PIPELINE_OPS),
    "dict": (CD.DictDS, CD.PIPELINE_OPS),
    "partial": (CD.PartialDS, CD.PIPELINE_OPS),
    "wrapped": (CD.WrapperDS, [*CD.PIPELINE_OPS, "Lambda"]),
    "hf-set-transform": (_hf, CD.PIPELINE_OPS),
    "v2-pair": (CD.V2PairDS, ["RandomHorizontalFlip", "Lambda"]),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", list(DATASETS))
def test_composes_anywhere_are_timed(tmp_path, name, workers):
    make, names = DATASETS[name]
    ds = make()
    expected = list(torch.utils.data.DataLoader(ds, batch_size=4))
    got, events = _traced(tmp_path, ds, num_workers=workers,
                          **({"multiprocessing_context": "fork"} if workers else {}))
    for a, b in zip(got, expected, strict=True):  # same batches as torch
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    ops = _ops(events)
    assert sorted(set(ops["name"])) == sorted(set(names))
    per_sample = ops.groupby("sample").size()
    assert len(per_sample) == len(ds) and (per_sample == len(names)).all()
    # the transform span of each sample covers its ops
    tf = events[events["name"] == "transform"].set_index("sample")
    assert len(tf) == len(ds)
    first = ops.groupby("sample")["start_ns"].min()
    assert (tf.loc[first.index, "start_ns"] <= first).all()


@pytest.mark.timeout(120)
def test_spawned_workers_time_composes_and_user_objects_stay_untouched(tmp_path):
    ds = CD.AttrDS(n=8)
    before = list(ds.aug.transforms)
    _, events = _traced(tmp_path, ds, num_workers=2, multiprocessing_context="spawn")
    assert list(ds.aug.transforms) == before and all(type(t).__module__ != "lotus" for t in ds.aug.transforms)
    assert T.Compose.__call__ is C._ORIG_V1 or C._ORIG_V1 is None
    ops = _ops(events)
    assert set(ops["name"]) == set(CD.PIPELINE_OPS)
    assert set(ops["worker_id"]) == {0, 1}
