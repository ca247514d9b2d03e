"""The out-of-core engine (lotus.query.scan) gives the in-memory path's results: on the study's real
traces (rewritten as lotus files), synthetic runs and the outcome run (failed and exhausted fetches)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lotus.analysis.diagnosis import verdict
from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from lotus.analysis.stats import config_stats, preprocessing_stats
from lotus.analysis.throughput import throughput
from lotus.analysis.wait import wait_stats, wait_table
from lotus.query.moments import BINS_PER_OCTAVE, hist_quantiles
from lotus.query.outcomes import outcome_summary
from lotus.trace import schema as S
from lotus.trace.events import load_events
from lotus.trace.synthetic import PipelineSpec, write_native

REAL = Path(__file__).parents[1] / "data" / "lotus-2023" / "traces"
EXACT = {"count", "min", "max"}
QUANTILES = {"median", "p25", "p75", "p90", "p99", "iqr"}
REL_Q = 2 ** (1 / BINS_PER_OCTAVE) - 1  # the histogram's relative bin width


def native_from_events(events, directory: Path, *, keep_ranks: bool = False) -> Path:
    """Rewrite an events DataFrame as lotus trace files, one per process (a test fixture); every process as
    rank 0 of 1, or with ``keep_ranks`` its own rank (world size: the ranks seen)."""
    world = int(events["rank"].max()) + 1 if keep_ranks else 1
    directory.mkdir(parents=True, exist_ok=True)
    builtin = {e.name: e.id for e in S.BUILTIN_EVENTS}
    for pid, g in events.groupby("pid", sort=True, observed=True):
        role = str(g["role"].iloc[0])
        names = [str(n) for n in g["name"].unique()]
        ids = {n: builtin.get(n) for n in names}
        defs = b""
        nxt = S.FIRST_DYNAMIC_ID
        for n in names:
            if ids[n] is None:
                ids[n] = nxt
                raw = n.encode()
                for i in range(0, max(len(raw), 1), S.PAYLOAD_BYTES):
                    defs += S.RECORD.pack(S.CTRL_DEFINE, S.NS_EVENT_NAME, nxt, 0, 0, 0, 0, 0)[:8] + \
                        raw[i: i + S.PAYLOAD_BYTES].ljust(S.PAYLOAD_BYTES, b"\0")
                nxt += 1
        rec = np.zeros(len(g), S.RECORD_DTYPE)
        rec["name_id"] = [ids[str(n)] for n in g["name"]]
        for c in ("loader", "epoch", "start_ns", "dur_ns", "batch_id", "sample", "arg"):
            rec[c] = g[c].to_numpy()
        rank = int(g["rank"].iloc[0]) if keep_ranks else 0
        header = {"format": "lotus-trace", "version": 1, "role": role, "pid": int(pid), "rank": rank,
                  "world_size": world, "worker_id": int(g["worker_id"].iloc[0]), "boot_id": "b",
                  "anchor_wall_ns": 0, "anchor_mono_ns": 0}
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        who = "main" if role == "main" else f"w{int(g['worker_id'].iloc[0])}"
        with open(directory / f"lotus-r{rank}-{who}-p{int(pid)}{S.FILE_SUFFIX}", "wb") as f:
            f.write(S.PREAMBLE.pack(S.MAGIC, len(raw), S.RECORD_SIZE) + raw + defs + rec.tobytes())
    return directory


def assert_same_stats(a: dict, b: dict) -> None:
    assert list(a) == list(b)  # the same ops, in the same (pipeline) order
    for op, row in a.items():
        for k, v in row.items():
            w = b[op][k]
            if v is None or k in EXACT:
                assert v == w, (op, k)
            elif k == "iqr":  # a difference of two quantiles: their errors add up
                assert w == pytest.approx(v, abs=REL_Q * (row["p25"] + row["p75"]) + 1e-6), (op, k)
            elif k in QUANTILES:
                assert w == pytest.approx(v, rel=REL_Q, abs=1e-6), (op, k)
            else:
                assert w == pytest.approx(v, rel=1e-9), (op, k)


def close(a, b, path="") -> None:
    """Equal up to float rounding (sums of many values)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not (isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        assert b == pytest.approx(a, rel=1e-9), path
    else:
        assert a == b, path


def compare(run: Path, monkeypatch, *, outliers: bool = False) -> None:
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    mem = load_config(run, engine="auto")
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    scan = load_config(run, engine="auto")
    assert scan.events.attrs.get("engine") == "scan" and "op_engine" not in mem.events.attrs
    assert not (scan.events["cat"] == "op").any()  # per-sample detail stays on disk
    pd.testing.assert_frame_equal(mem.batches, scan.batches)
    assert mem.loaders == scan.loaders
    for ro in ((False, True) if outliers else (False,)):
        sm = config_stats(mem.events, mem.batches, remove_outliers=ro)
        ss = config_stats(scan.events, scan.batches, remove_outliers=ro)
        assert sm["batch_preprocessing_ms"] == ss["batch_preprocessing_ms"]
        assert sm["outliers_removed"] == ss["outliers_removed"] and sm["outcomes"] == ss["outcomes"]
        assert_same_stats(sm["ops_ms"], ss["ops_ms"])
    close(verdict(mem.events, mem.batches, loaders=mem.loaders),
          verdict(scan.events, scan.batches, loaders=scan.loaders))
    assert throughput(mem.batches, mem.loaders) == throughput(scan.batches, scan.loaders)
    close(wait_stats(mem.batches), wait_stats(scan.batches))
    if scan.table is not None:
        same_from_table(scan, outliers)


def same_from_table(cfg, outliers: bool = False) -> None:
    """The summaries from a scanned run's compact table (lotus.analysis.compact) are exactly those from
    its batches DataFrame."""
    t, b, ev = cfg.table, cfg.batches, cfg.events
    assert cfg.summary_batches is t
    for ro in ((False, True) if outliers else (False,)):
        assert dumps(config_stats(ev, t, remove_outliers=ro)) == dumps(config_stats(ev, b, remove_outliers=ro))
        assert dumps(preprocessing_stats(t, remove_outliers=ro, by="rank")) == \
            dumps(preprocessing_stats(b, remove_outliers=ro, by="rank"))
    assert dumps(verdict(ev, t, loaders=cfg.loaders)) == dumps(verdict(ev, b, loaders=cfg.loaders))
    assert dumps(wait_stats(t)) == dumps(wait_stats(b))
    assert outcome_summary(t) == outcome_summary(b)
    if wait_stats(b)["known"]:
        for sort in ("batch_id", "duration"):
            pd.testing.assert_frame_equal(wait_table(t, sort=sort), wait_table(b, sort=sort))


@pytest.mark.parametrize("config", ["b128_gpu4", "b256_gpu2", "b512_gpu1"])
def test_real_traces_same_results(config, tmp_path, monkeypatch):
    run = native_from_events(load_events(REAL / config), tmp_path / config)
    compare(run, monkeypatch, outliers=True)


def test_synthetic_epochs_and_ranks(tmp_path, monkeypatch):
    run = tmp_path / "synth"
    write_native(run, PipelineSpec(n_batches=30, batch_size=6, n_workers=3, epochs=2, ranks=2, seed=5))
    compare(run, monkeypatch, outliers=True)


def test_failed_and_exhausted_fetches_left_out(tmp_path, monkeypatch):
    from tests.trace.outcome_run import write_outcome_run

    for legacy in (False, True):
        run = write_outcome_run(tmp_path / f"o{legacy}", legacy=legacy)
        compare(run, monkeypatch)


@pytest.mark.detail_budget
@pytest.mark.timeout(180)
def test_budgeted_format_2_trace(tmp_path, monkeypatch):
    """A trace with per-sample detail for a share of its batches (format 2, derived load/transform spans):
    both engines scale per-op counts and totals by the same detail share."""
    from lotus.analysis.stats import op_totals_s
    from tests.dataloader.test_detail_budget import write_budget_run

    run = write_budget_run(tmp_path / "budget")
    monkeypatch.setenv("LOTUS_ENGINE", "memory")
    mem = load_config(run, engine="auto")
    share = mem.batches["detail"].mean()
    assert 0 < share < 1, share  # a sample of the batches, not all of them
    compare(run, monkeypatch)
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    scan = load_config(run, engine="auto")
    totals_m, totals_s = op_totals_s(mem.events), op_totals_s(scan.events)
    assert totals_m.keys() == totals_s.keys() and "transform" in totals_m
    for k in totals_m:
        assert totals_s[k] == pytest.approx(totals_m[k], rel=1e-9)
    assert config_stats(scan.events, scan.batches)["ops_ms"]["load"]["count"] == pytest.approx(2 * 480, rel=0.1)


def test_auto_picks_by_size(tmp_path, monkeypatch):
    run = tmp_path / "s"
    write_native(run, PipelineSpec(n_batches=5, batch_size=2, n_workers=1, seed=1))
    monkeypatch.delenv("LOTUS_ENGINE", raising=False)
    assert "op_engine" not in load_config(run, engine="auto").events.attrs
    monkeypatch.setenv("LOTUS_SCAN_BYTES", "100")
    assert "op_engine" in load_config(run, engine="auto").events.attrs
    assert "op_engine" not in load_config(run).events.attrs  # commands that need every event


def test_hist_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.lognormal(13, 1, 5000).astype(np.int64), [0, 0, 7]])
    from lotus.query.moments import _Moments

    m = _Moments()
    m.add(np.zeros(len(vals), np.int64), vals, 1)
    assert m.lo[0] == vals.min() and m.hi[0] == vals.max() and m.n[0] == len(vals)
    assert m.mean[0] == pytest.approx(vals.mean(), rel=1e-12)
    assert math.sqrt(m.m2[0] / len(vals)) == pytest.approx(vals.std(), rel=1e-9)
    got = hist_quantiles(m.hist[0], (0.25, 0.5, 0.9, 0.99), float(vals.min()), float(vals.max()))
    want = np.percentile(vals, [25, 50, 90, 99])
    assert got == pytest.approx(want, rel=REL_Q)
