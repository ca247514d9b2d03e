"""Issue 25: a scanned run's batches a piece at a time (BatchTable.frames): ``lotus export`` writes the pieces
(the Parquet contents the whole frame made), the frame is assembled from them, and ``lotus diff`` makes a
frame of only the columns it reads: the same outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from lotus.analysis import export as X
from lotus.analysis.runs import load_config
from lotus.trace.simulated import PipelineSpec
from lotus.trace.synthetic import write_native


def scanned(run, monkeypatch):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    cfg = load_config(run, engine="auto")
    assert cfg.table is not None and not cfg.table.partial
    return cfg


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """More batches than a piece of 1024 rows (two ranks, three epochs)."""
    d = tmp_path_factory.mktemp("pieces") / "run"
    write_native(d, PipelineSpec(n_batches=450, batch_size=2, n_workers=3, epochs=3, ranks=2, seed=5,
                                 ops_ms={"Crop": 1.0}))
    return d


def assert_pieces_are_the_frame(table, rows):
    whole = table.frame()
    pieces = list(table.frames(rows))
    assert len(pieces) == max(1, -(-len(whole) // rows))
    for p in pieces:
        assert p.attrs.keys() == whole.attrs.keys()
        assert {k: v for k, v in p.attrs.items() if k != "op_engine"} == \
            {k: v for k, v in whole.attrs.items() if k != "op_engine"}
    got = pd.concat(pieces, ignore_index=True)
    assert list(got.dtypes) == list(whole.dtypes)
    pd.testing.assert_frame_equal(got, whole, check_exact=True)


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_pieces_are_the_frame(synth_epochs, straggler_run, ddp_run, monkeypatch, rows):
    for run in (synth_epochs, straggler_run, ddp_run):
        assert_pieces_are_the_frame(scanned(run, monkeypatch).table, rows)


def test_pieces_with_batches_without_collate(big_run, monkeypatch):
    """n_samples of batches without a collate come from one more scan, counted once for every piece; the
    detail flag of the whole run (a piece without any flagged fetch is not a run without the flag)."""
    table = scanned(big_run, monkeypatch).table
    c = table.raw["_collate_n"]
    miss = np.iinfo(c.dtype).min
    c[np.arange(0, len(c), 5)] = miss  # every 5th batch without a collate: its samples counted instead
    assert table.n_samples_missing().sum() == len(range(0, len(c), 5))
    assert_pieces_are_the_frame(table, 100)
    f = table.raw["_fetch_flags"]
    f[200:] &= ~4  # FETCH_DETAIL only on the first 200 rows: later pieces have none
    assert_pieces_are_the_frame(table, 100)


def test_export_file_identical(big_run, tmp_path, monkeypatch):
    """The file of the pieces is the whole frame's: byte-identical here (no column's dictionary outgrows
    the writer's limit), and the same schema, metadata and rows with row groups of fewer rows."""
    cfg = scanned(big_run, monkeypatch)
    assert len(cfg.table) > 2 * 1024
    whole = tmp_path / "whole"
    X.export_parquet(cfg.events, cfg.table.frame(), whole)
    monkeypatch.setattr(X, "PIECE_ROWS", 1024)
    X.export_parquet(cfg.events, cfg.table, tmp_path / "pieces")
    for name in ("events.parquet", "batches.parquet"):
        assert (tmp_path / "pieces" / name).read_bytes() == (whole / name).read_bytes(), name
    monkeypatch.setattr(X, "PIECE_ROWS", 100)
    monkeypatch.setattr(X, "ROW_GROUP_ROWS", 1000)
    X.export_parquet(cfg.events, cfg.table, tmp_path / "small")
    a, b = pq.read_table(whole / "batches.parquet"), pq.read_table(tmp_path / "small" / "batches.parquet")
    assert a.schema.equals(b.schema, check_metadata=True)
    assert a.equals(b)
    assert pq.ParquetFile(tmp_path / "small" / "batches.parquet").metadata.num_row_groups == \
        -(-len(cfg.table) // 1000)


def test_export_command_same_files(big_run, tmp_path, monkeypatch):
    """``lotus export`` on the scan engine: the files the whole frame made before."""
    from tests.cli.conftest import run

    cfg = scanned(big_run, monkeypatch)
    X.export_parquet(cfg.events, cfg.table.frame(), tmp_path / "whole")
    out = run("export", "-d", big_run, "-o", tmp_path / "cmd").output
    assert f"{len(cfg.table)} batches" in out
    (d,) = (tmp_path / "cmd").iterdir()
    for name in ("events.parquet", "batches.parquet"):
        assert (d / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_frame_assembled_from_pieces(big_run, monkeypatch):
    """A table of more rows than a view makes its frame from its pieces: the frame made in one go."""
    from lotus.query import batchtable

    table = scanned(big_run, monkeypatch).table
    c = table.raw["_collate_n"]
    c[np.arange(3, len(c), 11)] = np.iinfo(c.dtype).min  # some n_samples from the per-sample events
    whole = table._whole_frame()
    monkeypatch.setattr(batchtable, "FRAME_ROWS", 256)
    got = table.frame()
    assert len(got) > 4 * 256
    assert got.attrs == whole.attrs
    assert list(got.dtypes) == list(whole.dtypes)
    pd.testing.assert_frame_equal(got, whole, check_exact=True)
    assert type(got.index) is type(whole.index)


def test_diff_of_tables_same(big_run, straggler_run, synth_epochs, monkeypatch):
    """diff_runs on the tables (a frame of DIFF_COLUMNS; loop spans and outcomes of the tables) gives the
    dict it gives on the whole frames, exactly; and the frame of some columns is those of the whole."""
    from lotus.analysis.diff import DIFF_COLUMNS, diff_runs
    from lotus.query import batchtable

    cfgs = [scanned(r, monkeypatch) for r in (big_run, straggler_run, synth_epochs)]
    for a in cfgs:
        for b in cfgs:
            for top in (0, 1, 5, 10_000):  # the tables: matched on packed keys, no merged frame
                want = diff_runs(a.events, a.table.frame(), b.events, b.table.frame(), top=top)
                assert diff_runs(a.events, a.table, b.events, b.table, top=top) == want
    monkeypatch.setattr(batchtable, "FRAME_ROWS", 300)
    t = cfgs[0].table
    pd.testing.assert_frame_equal(t.frame(DIFF_COLUMNS), t._whole_frame()[DIFF_COLUMNS], check_exact=True)



@pytest.mark.parametrize("top", [0, 1, 3, 10, 50, 1000])
def test_top_candidates_hold_the_stable_sorts_head(top):
    """diff's most slowed-down batches of two tables: the stable descending sort of the candidate rows only
    gives the head of the sort of every row, ties at the cut included."""
    from lotus.analysis.diff import top_candidates

    rng = np.random.default_rng(top)
    for values in (rng.integers(0, 5, 200).astype(float), rng.normal(size=300), np.zeros(40), np.array([1.0])):
        whole = pd.Series(values).sort_values(ascending=False, kind="stable").head(top)
        cand = top_candidates(values, top)
        got = pd.Series(values[cand], index=cand).sort_values(ascending=False, kind="stable").head(top)
        assert list(got.index) == list(whole.index)
