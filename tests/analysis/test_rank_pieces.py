"""`lotus analyze ranks` of one large rank (issue 25, item 2): a rank's figures from pieces of its rows (any cuts,
inside epochs and groups) are those of its whole DataFrame: the per-piece reductions merged
(lotus.analysis.shares), the GPU times and the measured rows concatenated, the report identical."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import collective
from lotus.analysis.diagnosis import (
    epoch_bounds,
    epoch_spans,
    loop_span_sums,
    loop_spans,
    worker_sums,
    worker_utilisation,
)
from lotus.analysis.gpu import gpu_batches, gpu_ms_by_rank
from lotus.analysis.jsonutil import dumps
from lotus.analysis.ranks import RANK_BATCH_COLUMNS, rank_report
from lotus.analysis.runs import load_config
from lotus.analysis.shares import epoch_spans_of, loop_spans_of, utilisation_of_parts
from lotus.analysis.throughput import _per_loader, loader_rates, rate_rows
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.analysis.test_gpu import write_gpu_run
from tests.analysis.test_ranks import JOB
from tests.trace.outcome_run import write_outcome_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One rank of several epochs and workers; four ranks on two nodes, one slow; GPU timings of three
    ranks; failed and exhausted fetches."""
    root = tmp_path_factory.mktemp("pieces")
    write_native(root / "one", PipelineSpec(n_batches=30, batch_size=4, n_workers=3, epochs=3, seed=5))
    write_native(root / "four", PipelineSpec(**{**JOB, "slow_rank_load": 3.0}), ranks_per_node=2)
    write_gpu_run(root / "gpu", ranks=(0, 1, 2), n=30, slow_rank=1)
    write_outcome_run(root / "outcomes", legacy=False)
    return {name: root / name for name in ("one", "four", "gpu", "outcomes")}


def cuts(n: int, rng) -> list[tuple[int, int]]:
    """Random consecutive (lo, hi) row ranges covering n rows: single rows, empty pieces and large ones."""
    k = int(rng.integers(1, min(max(n // 3, 2), 25)))
    edges = np.sort(np.r_[0, rng.integers(0, n + 1, size=k), n])
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def pieces_of(b: pd.DataFrame, rng) -> list[pd.DataFrame]:
    return [b.iloc[lo:hi].reset_index(drop=True) for lo, hi in cuts(len(b), rng)]


@pytest.mark.parametrize("name", ["one", "four", "gpu", "outcomes"])
def test_merged_pieces_are_the_whole(runs, name):
    """loop spans, epoch spans, worker utilisation, GPU times and loader rates of pieces merged: exactly the
    whole frame's (every cut tried keeps the values and dtypes)."""
    b = load_config(runs[name], engine="memory").batches
    assert len(b) >= 7
    rng = np.random.default_rng(11)
    want_rates = _per_loader(loader_rates(b))
    for _ in range(6):
        pieces = pieces_of(b, rng)
        assert len(pieces) > 1
        pd.testing.assert_frame_equal(loop_spans_of([loop_span_sums(p) for p in pieces]), loop_spans(b),
                                      check_exact=True)
        pd.testing.assert_frame_equal(epoch_spans_of([epoch_bounds(p) for p in pieces]), epoch_spans(b),
                                      check_exact=True)
        pd.testing.assert_frame_equal(utilisation_of_parts([worker_sums(p) for p in pieces]), worker_utilisation(b),
                                      check_exact=True)
        gpu = gpu_batches(b)
        got: dict[int, list] = {}
        for p in pieces:
            for r, (w, s) in gpu_ms_by_rank(p).items():
                got.setdefault(r, []).append((w, s))
        assert sorted(got) == sorted(set(gpu["rank"].tolist()))
        for r, g in gpu.groupby("rank", sort=True):
            np.testing.assert_array_equal(np.concatenate([w for w, _ in got[r]]), g["gpu_wait_ms"].to_numpy())
            np.testing.assert_array_equal(np.concatenate([s for _, s in got[r]]), g["gpu_step_ms"].to_numpy())
        rows = pd.concat([rate_rows(p) for p in pieces], ignore_index=True)
        pd.testing.assert_frame_equal(_per_loader(loader_rates(rows)), want_rates, check_exact=True)
    if name == "gpu":
        assert np.isfinite(gpu["gpu_wait_ms"]).any()
    if name == "outcomes":
        assert b["failed"].any()


@pytest.mark.parametrize("name", ["one", "four", "gpu", "outcomes"])
def test_the_report_a_piece_at_a_time_is_the_report(runs, name):
    """rank_report of a run's rows as pieces, in one part or in parts of whole ranks each cut into pieces: the
    report of its whole DataFrame, byte for byte."""
    cfg = load_config(runs[name], engine="memory")
    b = cfg.batches[RANK_BATCH_COLUMNS]
    want = dumps(rank_report(cfg.events, cfg.batches, cfg.loaders, cfg.files))
    rng = np.random.default_rng(7)
    for _ in range(3):
        one_part = [pieces_of(b, rng)]
        by_rank = [pieces_of(b[b["rank"] == r].reset_index(drop=True), rng) for r in sorted(set(b["rank"]))]
        for parts in (one_part, by_rank, [iter(p) for p in by_rank]):
            assert dumps(rank_report(cfg.events, iter(parts), cfg.loaders, cfg.files)) == want


def test_one_scanned_rank_is_read_a_piece_at_a_time(runs, monkeypatch):
    """A scanned run of one rank larger than a piece: batches_by_rank gives one part of pieces (no rank's
    DataFrame made), and the report is the one of the whole DataFrame (and the memory engine's)."""
    from lotus.query import batchtable

    monkeypatch.setattr(batchtable, "FRAME_ROWS", 16)
    cfg = load_config(runs["one"], engine="scan")
    parts = [list(p) for p in cfg.batches_by_rank(RANK_BATCH_COLUMNS)]  # a part's pieces read before the next
    assert len(parts) == 1
    pieces = parts[0]
    assert len(pieces) > 5 and all(len(p) <= 16 for p in pieces) and cfg.__dict__.get("_batches") is None
    got = dumps(rank_report(cfg.events, iter([iter(pieces)]), cfg.loaders, cfg.files))
    whole = load_config(runs["one"], engine="scan")
    assert got == dumps(rank_report(whole.events, whole.batches, whole.loaders, whole.files))
    mem = load_config(runs["one"], engine="memory")
    assert got == dumps(rank_report(mem.events, mem.batches, mem.loaders, mem.files))


def test_step_rows_of_the_measured_rows_are_the_step_rows(runs):
    """The step rows made of the measured rows kept (rate_rows with the key and the request's start) are those
    of the whole frame."""
    b = load_config(runs["four"], engine="memory").batches
    main = {r: 0 for r in range(4)}
    want = collective.step_rows(b, main)
    got = collective.step_rows(rate_rows(b, ("batch_id", "wait_start_ns")), main)
    assert sorted(got) == sorted(want) and len(want["rank"]) > 100
    for c in want:
        np.testing.assert_array_equal(got[c], want[c])
        assert got[c].dtype == want[c].dtype
