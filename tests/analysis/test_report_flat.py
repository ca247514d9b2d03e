"""Issue 25 item 2: ``lotus report`` and ``lotus plot`` of a scanned run never make its whole batches
DataFrame (:meth:`lotus.query.BatchTable.frame` of every column, ~220 bytes a batch): the summaries read the
compact table, the throughput, the trends and each figure a DataFrame of the few columns they read. The
outputs are the bytes the whole DataFrame gave."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from lotus.analysis.report import write_report
from lotus.analysis.runs import load_configs
from lotus.cli import cli
from lotus.query import BatchTable
from tests.trace.outcome_run import write_outcome_run

SINGLE_RANK = ["synth_native", "synth_epochs", "straggler_run"]
MAX_COLUMNS = 12  # the widest DataFrame any of them reads (the trends', the worker timeline's)


@pytest.fixture
def no_whole_frame(monkeypatch):
    """BatchTable.frame raises for every column (the whole DataFrame) or more than MAX_COLUMNS; returns the
    column lists asked for."""
    asked = []
    orig = BatchTable.frame

    def frame(self, columns=None, rows=None):
        if columns is None or len(columns) > MAX_COLUMNS:
            raise AssertionError(f"the batches DataFrame of {'every' if columns is None else len(columns)} "
                                 "column(s) made")
        asked.append(list(columns))
        return orig(self, columns, rows)

    monkeypatch.setattr(BatchTable, "frame", frame)
    return asked


def _runs(request, tmp_path):
    runs = [request.getfixturevalue(f) for f in SINGLE_RANK]
    return runs + [write_outcome_run(tmp_path / f"o{legacy}", legacy=legacy) for legacy in (False, True)]


@pytest.mark.parametrize("command", [["report", "-o", "{out}/r.html"], ["report", "--remove-outliers", "-o",
                                                                          "{out}/r.html"],
                                     ["plot", "-o", "{out}", "--format", "png", "--sort", "duration"]])
def test_no_whole_batches_frame(command, request, tmp_path, monkeypatch, no_whole_frame):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    for i, run in enumerate(_runs(request, tmp_path)):
        args = [a.format(out=tmp_path / f"out{i}") for a in command]
        r = CliRunner().invoke(cli, [args[0], "-d", str(run), *args[1:]])
        assert r.exit_code == 0, (run, r.output, r.exception)
    assert no_whole_frame  # the throughput, trends and figures read the table's columns


@pytest.mark.parametrize("remove_outliers", [False, True])
@pytest.mark.parametrize("fixture", [*SINGLE_RANK, "ddp_run", "outcome"])
def test_same_bytes_as_the_whole_frame(fixture, remove_outliers, request, tmp_path, monkeypatch):
    """report.html (figures included) and report.json from the table are the bytes that the whole batches
    DataFrame of the same scan gives (each function's DataFrame path)."""
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    run = write_outcome_run(tmp_path / "o") if fixture == "outcome" else request.getfixturevalue(fixture)
    table = load_configs(run, engine="auto", op_reduce="values")
    whole = load_configs(run, engine="auto", op_reduce="values")
    for c in whole:
        assert c.table is not None
        c.batches = c.table.frame()
        c.table = None  # summary_batches: the DataFrame
    out = []
    for name, configs in (("table", table), ("whole", whole)):
        html, js = write_report(configs, tmp_path / name / "r.html", remove_outliers=remove_outliers)
        out.append((html.read_bytes(), js.read_bytes()))
    assert out[0] == out[1]


@pytest.mark.parametrize("frame_rows", [5, 1 << 16])
def test_frame_of_rows(frame_rows, straggler_run, monkeypatch):
    """BatchTable.frame(columns, rows=mask): frame(columns)[mask] indexed from 0, whole or in pieces."""
    import numpy as np
    import pandas as pd

    import lotus.query.batchtable as bt

    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    table = load_configs(straggler_run, engine="auto")[0].table
    monkeypatch.setattr(bt, "FRAME_ROWS", frame_rows)
    rng = np.random.default_rng(0)
    cols = ["rank", "epoch", "batch_id", "n_samples", "wait_dur_ns", "failed", "detail", "buffered", "status"]
    for mask in (np.ones(len(table), bool), np.zeros(len(table), bool), rng.random(len(table)) < 0.4):
        got = table.frame(cols, rows=mask)
        want = table.frame(cols)[mask].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)
    with pytest.raises(ValueError):
        table.frame(cols, rows=np.ones(len(table) + 1, bool))


def test_a_scatter_of_more_batches_than_it_draws_keeps_every_long_one(monkeypatch):
    """Past SCATTER_MAX_POINTS the wait and delay scatters draw every batch at or above the 500 ms line and
    a stride of the others, and say so; below it, every batch (the fixtures' figures are unchanged)."""
    import numpy as np
    import pandas as pd

    from lotus.analysis import plots

    monkeypatch.setattr(plots, "SCATTER_MAX_POINTS", 100)
    rng = np.random.default_rng(0)
    y = rng.uniform(1, 100, 1000)
    y[[3, 500, 999]] = [600, 5000, 800]
    keep, note = plots._thinned(y)
    assert {3, 500, 999} <= set(keep.tolist()) and len(keep) <= 110 and "of 1,000 batches" in note
    assert list(plots._thinned(y[:100])[0]) == list(range(100)) and plots._thinned(y[:100])[1] == ""
    df = pd.DataFrame({"x": np.arange(1000), "wait_ms": y, "buffered": np.zeros(1000, bool)})
    fig = plots.wait_plot(df)
    drawn = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert drawn == len(keep) and "every" in fig.axes[0].get_xlabel()
    fig = plots.delay_plot(df.rename(columns={"wait_ms": "delay_ms"}))
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == len(keep)


@pytest.mark.parametrize("sort", ["batch_id", "duration"])
@pytest.mark.parametrize("seed", range(4))
def test_sorted_order_is_sorted_table(sort, seed):
    """The compact wait table's order (waitcore.sorted_order: lexsort / stable argsort, None where in order
    already) is sort_values' (waitcore.sorted_table), ties and NaN included."""
    import numpy as np
    import pandas as pd

    from lotus.analysis.waitcore import sorted_order, sorted_table

    rng = np.random.default_rng(seed)
    n = 200
    cols = {"rank": rng.integers(0, 2, n), "loader": rng.integers(0, 2, n), "epoch": rng.integers(0, 3, n),
            "batch_id": rng.integers(0, 20, n), "wait_ms": np.round(rng.random(n), 1)}
    cols["wait_ms"][::17] = np.nan
    cols["wait_ms"][::13] = -0.0
    cols["tag"] = np.arange(n)
    for c in (cols, {k: v[np.lexsort([cols[x] for x in ("batch_id", "epoch", "loader", "rank")])]
                     for k, v in cols.items()}):
        want = sorted_table(pd.DataFrame(c), sort)
        order = sorted_order(c, sort)
        got = pd.DataFrame(c if order is None else {k: v[order] for k, v in c.items()})
        pd.testing.assert_frame_equal(got, want)
