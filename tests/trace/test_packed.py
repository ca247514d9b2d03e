"""Packed num_workers=0 batches (format version 3): expanded by every reader into version 2's records."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from lotus.trace import load_events
from lotus.trace import schema as S
from lotus.trace.native import RECORD_DTYPE, read_header, read_trace_file
from lotus.trace.packed import expand_main_batches
from lotus.trace.parts import iter_records
from lotus.trace.writer import TraceWriter

NO = S.NO_ID


def _rows(*rows) -> np.ndarray:
    return np.array(list(rows), dtype=RECORD_DTYPE)


def _pair(batch, d0, f0, c0, end, w0, t1, prev=(NO, 0), flags=0, items=8, lo=0, ep=1):
    return [(S.EV_MAIN_BATCH, lo, ep, d0, end - d0, batch, f0 - d0, c0 - d0 if c0 else -1),
            (S.EV_MAIN_LOOP, lo, ep, w0, t1 - w0, prev[0], prev[1], flags | (items + 1) << S.MAIN_ITEMS_SHIFT)]


def test_a_pair_expands_into_what_version_2_wrote():
    marker = (S.EV_EPOCH_START, 0, 1, 50, 0, NO, NO, 0)
    arr = _rows(marker, *_pair(0, 100, 110, 150, 160, 90, 170),
                *_pair(1, 200, 205, 0, 230, 195, 240, prev=(0, 170), flags=S.FETCH_DETAIL, items=-1))
    out = expand_main_batches(arr)
    want = _rows(marker,
                 (S.EV_DISPATCH, 0, 1, 100, 10, 0, NO, -1),
                 (S.EV_COLLATE, 0, 1, 150, 10, 0, NO, 8),
                 (S.EV_FETCH, 0, 1, 110, 50, 0, NO, 0),
                 (S.EV_WAIT, 0, 1, 90, 80, 0, NO, 0),
                 (S.EV_CONSUMED, 0, 1, 170, 0, 0, NO, 0),
                 (S.EV_DISPATCH, 0, 1, 200, 5, 1, NO, -1),  # no collation: none written
                 (S.EV_FETCH, 0, 1, 205, 25, 1, NO, S.FETCH_DETAIL),
                 (S.EV_STEP, 0, 1, 170, 25, 0, NO, 0),  # the previous batch's step ends where this wait starts
                 (S.EV_WAIT, 0, 1, 195, 45, 1, NO, 0),
                 (S.EV_CONSUMED, 0, 1, 240, 0, 1, NO, 0))
    assert out.tolist() == want.tolist()
    plain = _rows(marker)
    assert expand_main_batches(plain) is plain  # nothing packed: the same array


def test_a_file_ending_after_a_batch_record_keeps_its_batch(caplog):
    arr = _rows(*_pair(0, 100, 110, 150, 160, 90, 170))[:1]
    out = expand_main_batches(arr)
    assert out["name_id"].tolist() == [S.EV_DISPATCH, S.EV_COLLATE, S.EV_FETCH]
    assert out["arg"].tolist() == [-1, -1, 0]  # items and flags were in the missing record
    orphan = _rows(*_pair(0, 100, 110, 150, 160, 90, 170))[1:]
    with caplog.at_level(logging.WARNING, logger="lotus.trace"):
        assert len(expand_main_batches(orphan, "f.lotustrace")) == 0
    assert "f.lotustrace: 1 packed loop record(s) without their batch record" in caplog.text


def _packed_file(tmp_path, batches: int):
    w = TraceWriter(tmp_path, "main")
    t = 1_000
    prev = (NO, 0)
    for b in range(batches):
        w.buf += S.PACK2(*_pair(b, t, t + 3, t + 7, t + 9, t - 1, t + 11, prev=prev)[0],
                         *_pair(b, t, t + 3, t + 7, t + 9, t - 1, t + 11, prev=prev)[1])
        prev = (b, t + 11)
        t += 20
    w.close()
    return w.path


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64])
def test_chunks_never_split_a_pair(tmp_path, chunk):
    path = _packed_file(tmp_path, 7)
    _, offset = read_header(path)
    chunks = [c.copy() for c in iter_records(path, offset, chunk)]
    assert all(c["name_id"][-1] != S.EV_MAIN_BATCH for c in chunks)
    whole = np.concatenate(chunks)
    whole = expand_main_batches(whole[whole["name_id"] >= 0])  # events only (as the readers see them)
    pieces = [expand_main_batches(c[c["name_id"] >= 0]) for c in chunks]
    assert np.concatenate(pieces).tolist() == whole.tolist()
    assert whole.tolist() == read_trace_file(path).records.tolist()
    assert (whole["name_id"] == S.EV_WAIT).sum() == 7


@pytest.mark.timeout(120)
def test_a_traced_loop_reads_the_same_through_every_engine(tmp_path, monkeypatch):
    import torch

    from lotus.dataloader import DataLoader
    from tests.trace.test_scan import compare

    ds = torch.utils.data.TensorDataset(torch.arange(40.0))
    loader = DataLoader(ds, batch_size=4, trace_dir=tmp_path)
    for _ in range(2):
        for _ in loader:
            pass
    del loader
    files = list(tmp_path.glob("*.lotustrace"))
    ids = np.concatenate([np.fromfile(f, RECORD_DTYPE, offset=read_header(f)[1])["name_id"] for f in files])
    assert (ids == S.EV_MAIN_BATCH).sum() == (ids == S.EV_MAIN_LOOP).sum() == 20
    counts = load_events(tmp_path)["name"].astype(str).value_counts()
    assert [counts[k] for k in ("dispatch", "collate", "fetch", "wait", "consumed", "step")] == [20] * 6
    compare(tmp_path, monkeypatch, outliers=True)  # memory and scan engines: the same batches and summaries
