"""Format >= 2 derives each sample's ``load`` and ``transform`` spans from its op records, which may lie in
the chunk before its ``sample`` record (:class:`lotus.trace.native.SampleSpans` carries them over): the
events read in chunks of any size are those of the whole file at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torchvision import transforms as T

from lotus.trace import events as events_mod
from lotus.trace import load_events, native


def _double(x):
    return x * 2


class _DS(torch.utils.data.Dataset):
    def __init__(self):
        self.transform = T.Compose([T.Lambda(_double), T.Lambda(torch.neg), T.Lambda(torch.abs)])

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i):
        return self.transform(torch.full((2,), float(i)))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    from lotus.dataloader import DataLoader

    run = tmp_path_factory.mktemp("derived") / "run"
    loader = DataLoader(_DS(), batch_size=4, num_workers=2, trace_dir=run, trace_detail="full",
                        multiprocessing_context="fork")
    for _b in loader:
        pass
    del loader
    return run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("chunk", [3, 7, 50])
def test_chunked_reads_derive_the_whole_file_spans(full_run, chunk, monkeypatch):
    whole = load_events(full_run)
    monkeypatch.setattr(events_mod, "_CHUNK_RECORDS", chunk)
    chunked = load_events(full_run)
    tf = whole[whole["name"] == "transform"]
    assert len(tf) == 40 and (tf["dur_ns"] > 0).all()
    pd.testing.assert_frame_equal(whole.reset_index(drop=True), chunked.reset_index(drop=True))


def test_sample_spans_over_any_split():
    """The deriver over every split of one file's records equals the derivation of the whole array."""
    recs = []
    t = 1_000
    for b in range(3):
        for s in range(4):
            start = t
            for _op in range(3):  # op records, then the item's sample record
                recs.append((S_OP, 0, 0, t + 10, 5, b, s, 0))
                t += 20
            recs.append((native.S.EV_SAMPLE, 0, 0, start, t - start, b, s, 10))
            t += 5
    arr = np.array(recs, dtype=native.RECORD_DTYPE)
    want = native.derive_sample_spans(arr)
    for cut in range(1, len(arr)):
        d = native.SampleSpans()
        got = np.concatenate([d(arr[:cut]), d(arr[cut:])])
        assert np.array_equal(got, want), cut


S_OP = native.S.FIRST_DYNAMIC_ID
