"""A worker's set-up inherits what the main process made before the fork: the dataset's traced class
(lotus.dataloader.instrument.prepare_in_parent), made once per class, handed each worker's recorder."""

import os
import pickle

import pytest

from lotus.dataloader import DataLoader
from lotus.dataloader import instrument as I
from lotus.dataloader.recorder import Recorder
from lotus.trace.writer import TraceWriter
from tests.dataloader import datasets as D


def _rec(tmp_path, wid):
    return Recorder(TraceWriter(tmp_path, "worker", worker_id=wid), 0, 0, None, worker_id=wid)


class _Fresh(D.MapDS):  # a class no other test made a traced class of
    pass


def test_prepared_class_is_the_one_a_worker_uses_with_its_recorder(tmp_path):
    ds = _Fresh(n=4)
    I.prepare_in_parent(ds, iterable=False)
    made = I._traced_classes[(_Fresh, False)]
    assert made._lotus_rec is None
    rec = _rec(tmp_path, 0)
    assert I.instrument_in_worker(ds, rec, iterable=False)
    assert type(ds) is made and made._lotus_rec is rec
    item = ds[1]  # times the item through the recorder the class holds
    assert item[1] == 1
    # another recorder in the same process (never a worker's case): a class of its own, the first one kept
    other = _Fresh(n=4)
    rec2 = _rec(tmp_path, 1)
    assert I.instrument_in_worker(other, rec2, iterable=False)
    assert type(other) is not made and type(other)._lotus_rec is rec2 and made._lotus_rec is rec
    # the traced instance still pickles as the user's class
    assert type(pickle.loads(pickle.dumps(ds))) is _Fresh


@pytest.mark.timeout(60)
def test_forked_workers_find_the_class_made_before_the_fork(tmp_path):
    """Through a real loader: the traced class exists in the main process once its workers started, and
    the batches are torch's own."""

    class _Forked(D.MapDS):
        pass

    loader = DataLoader(_Forked(n=16), batch_size=4, num_workers=2, trace_dir=tmp_path,
                        multiprocessing_context="fork" if hasattr(os, "fork") else None)
    import torch

    got = [b[1].tolist() for b in loader]
    want = [b[1].tolist() for b in torch.utils.data.DataLoader(_Forked(n=16), batch_size=4, num_workers=0)]
    assert got == want and len(got) == 4
    assert (_Forked, False) in I._traced_classes
