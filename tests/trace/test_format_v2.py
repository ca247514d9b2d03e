"""Format version 2 (issue 16): `load`/`transform` derived at read time; version 1 reads as before."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torchvision import transforms as T

from lotus.analysis.diagnosis import verdict
from lotus.analysis.stats import config_stats
from lotus.dataloader import DataLoader
from lotus.query import load_batches
from lotus.trace import load_events
from lotus.trace import schema as S
from lotus.trace.native import RECORD_DTYPE, derive_sample_spans, read_header


def _double(x):
    return x * 2


class _DS(torch.utils.data.Dataset):
    def __init__(self):
        self.transform = T.Compose([T.Lambda(_double), T.Compose([T.Lambda(torch.neg)]), T.Lambda(torch.abs)])

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i):
        x = torch.full((4,), float(i))
        return (self.transform(x) if i % 5 else x), i  # every fifth sample without a transform


def _as_version_1(src, dst) -> None:
    """Rewrite a version-2 file as lotus <= 0.2 wrote it: `load`, `transform`, `sample` per item (the
    transform ending with the item's last op), fetches without the detail flag. A plain loop, written
    independently of the reader's vectorised derivation."""
    raw = src.read_bytes()
    header, offset = read_header(src)
    header["version"] = 1
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    recs = _unpacked(np.frombuffer(raw[offset:], dtype=RECORD_DTYPE))
    out, op_end = [], {}
    for r in recs:
        r = r.copy()
        nid = int(r["name_id"])
        if nid >= S.FIRST_DYNAMIC_ID:
            key = (int(r["batch_id"]), int(r["sample"]))
            op_end[key] = max(op_end.get(key, 0), int(r["start_ns"] + r["dur_ns"]))
        if nid == S.EV_FETCH:
            r["arg"] &= ~S.FETCH_DETAIL
        if nid == S.EV_SAMPLE:
            t0, load = int(r["start_ns"]), int(r["arg"])
            key = (int(r["batch_id"]), int(r["sample"]))
            lo = r.copy()
            lo["name_id"], lo["arg"] = S.EV_LOAD, 0
            lo["dur_ns"] = load if load >= 0 else r["dur_ns"]
            out.append(lo)
            if load >= 0:
                tf = r.copy()
                tf["name_id"], tf["arg"], tf["start_ns"] = S.EV_TRANSFORM, 0, t0 + load
                tf["dur_ns"] = op_end.get(key, t0 + load) - (t0 + load)
                out.append(tf)
            r["arg"] = 0
            op_end.pop(key, None)
        out.append(r)
    body = np.array(out, dtype=RECORD_DTYPE).tobytes()
    dst.write_bytes(S.PREAMBLE.pack(S.MAGIC, len(head), S.RECORD_SIZE) + head + body)


def _unpacked(recs: np.ndarray) -> np.ndarray:
    """Version >= 3 records with each packed num_workers=0 batch (a batch record and the loop record after
    it) written out as the six records version 2 wrote: a plain loop over the documented fields."""
    out = []
    i = 0
    while i < len(recs):
        a = recs[i]
        if int(a["name_id"]) != S.EV_MAIN_BATCH:
            out.append(a)
            i += 1
            continue
        b = recs[i + 1]
        assert int(b["name_id"]) == S.EV_MAIN_LOOP
        lo, ep, batch = int(a["loader"]), int(a["epoch"]), int(a["batch_id"])
        d0, end, disp, coll = int(a["start_ns"]), int(a["start_ns"] + a["dur_ns"]), int(a["sample"]), int(a["arg"])
        w0, wait, prev_b, prev_t, arg = (int(b[k]) for k in ("start_ns", "dur_ns", "batch_id", "sample", "arg"))
        rows = [(S.EV_DISPATCH, lo, ep, d0, disp, batch, S.NO_ID, -1)]
        if coll >= 0:
            rows.append((S.EV_COLLATE, lo, ep, d0 + coll, end - d0 - coll, batch, S.NO_ID, (arg >> 32) - 1))
        rows.append((S.EV_FETCH, lo, ep, d0 + disp, end - d0 - disp, batch, S.NO_ID, arg & 0xFFFFFFFF))
        if prev_t:
            rows.append((S.EV_STEP, lo, ep, prev_t, w0 - prev_t, prev_b, S.NO_ID, 0))
        rows += [(S.EV_WAIT, lo, ep, w0, wait, batch, S.NO_ID, 0),
                 (S.EV_CONSUMED, lo, ep, w0 + wait, 0, batch, S.NO_ID, 0)]
        out += [np.array(r, dtype=RECORD_DTYPE) for r in rows]
        i += 2
    return np.array(out, dtype=RECORD_DTYPE)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_version_2_full_trace_analyses_as_its_version_1_form(tmp_path, workers):
    new, old = tmp_path / "v2", tmp_path / "v1"
    loader = DataLoader(_DS(), batch_size=8, num_workers=workers, trace_dir=new, trace_detail="full",
                        **({"multiprocessing_context": "fork"} if workers else {}))
    for _ in range(2):
        for _ in loader:
            pass
    del loader
    old.mkdir()
    files = sorted(new.glob("*.lotustrace"))
    assert files and all(read_header(f)[0]["version"] == S.FORMAT_VERSION for f in files)
    if not workers:  # every batch in a packed pair (version >= 3)
        recs = np.concatenate([np.fromfile(f, RECORD_DTYPE, offset=read_header(f)[1]) for f in files])
        assert (recs["name_id"] == S.EV_MAIN_BATCH).sum() == (recs["name_id"] == S.EV_MAIN_LOOP).sum() == 2 * 8
    for f in files:
        _as_version_1(f, old / f.name)
    ev_new, ev_old = load_events(new), load_events(old)
    assert (ev_new["name"] == "transform").sum() == 2 * 64 - 2 * 13  # 13 of 64 samples have no transform
    assert (ev_new["name"] == "load").sum() == 2 * 64
    fetch = (ev_new["name"] == "fetch").to_numpy()
    assert (ev_new["arg"].to_numpy()[fetch] & S.FETCH_DETAIL != 0).all()
    ev_new = ev_new.assign(arg=np.where(fetch, ev_new["arg"] & ~S.FETCH_DETAIL, ev_new["arg"]))
    cols = [c for c in ev_new.columns if c != "name"]
    pd.testing.assert_frame_equal(ev_new[cols].reset_index(drop=True), ev_old[cols].reset_index(drop=True))
    assert ev_new["name"].astype(str).tolist() == ev_old["name"].astype(str).tolist()
    b_new, b_old = load_batches(new), load_batches(old)
    pd.testing.assert_frame_equal(b_new, b_old)
    assert config_stats(ev_new, b_new) == config_stats(ev_old, b_old)
    assert verdict(ev_new, b_new) == verdict(ev_old, b_old)


def test_derive_sample_spans():
    rec = np.zeros(5, RECORD_DTYPE)
    # op, op (sample 3 of batch 0), sample 3 (load 10 ns), sample 4 without transform, sample 5 with no op record
    rec["name_id"] = [64, 65, S.EV_SAMPLE, S.EV_SAMPLE, S.EV_SAMPLE]
    rec["batch_id"] = 0
    rec["sample"] = [3, 3, 3, 4, 5]
    rec["start_ns"] = [110, 130, 100, 200, 300]
    rec["dur_ns"] = [20, 30, 70, 40, 50]
    rec["arg"] = [0, 0, 10, -1, 5]
    out = derive_sample_spans(rec)
    names = out["name_id"].tolist()
    assert names == [64, 65, S.EV_LOAD, S.EV_TRANSFORM, S.EV_SAMPLE, S.EV_LOAD, S.EV_SAMPLE, S.EV_LOAD,
                     S.EV_TRANSFORM, S.EV_SAMPLE]
    assert out["dur_ns"].tolist() == [20, 30, 10, 50, 70, 40, 40, 5, 0, 50]
    assert out["start_ns"].tolist() == [110, 130, 100, 110, 100, 200, 200, 300, 305, 300]
    assert (out["arg"][2:] == 0).all()
