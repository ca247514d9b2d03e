"""Issue 25: ``lotus report`` and ``lotus plot`` read a scanned run's files once. What the trends and the
figures read of the op records is kept during the scan (:mod:`lotus.query.opreduce`): the outputs are the
bytes the extra passes gave, and every file is opened once (counted)."""

from __future__ import annotations

import collections
import errno
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from lotus.analysis import plotdata
from lotus.analysis.report import write_report
from lotus.analysis.runs import load_configs
from lotus.analysis.trends import trends
from lotus.cli import cli
from lotus.trace import chunks, parts
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.trace.outcome_run import write_outcome_run

FIXTURES = ["synth_native", "synth_epochs", "straggler_run", "ddp_run", "real_run"]


@pytest.fixture
def opened(monkeypatch):
    """Counts of the record reads of each file (one per pass), in this process."""
    counts: collections.Counter = collections.Counter()
    orig = parts.iter_records

    def counting(path, offset, chunk):
        counts[str(path)] += 1
        yield from orig(path, offset, chunk)

    monkeypatch.setattr(parts, "iter_records", counting)
    monkeypatch.setattr(chunks, "iter_records", counting)
    return counts


def _configs(data_dir, monkeypatch, op_reduce, chunk=7):
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    with monkeypatch.context() as m:
        m.setattr(chunks, "CHUNK_RECORDS", chunk)  # ops of one batch split over chunks
        return load_configs(data_dir, engine="auto", op_reduce=op_reduce)


def _outputs(configs, tmp_path, name):
    html, js = write_report(configs, tmp_path / name / "r.html")
    frames = {"ops": plotdata.op_frame([(c.name, c.events) for c in configs], max_per_op=5),
              "cpu": plotdata.op_seconds_frame([(c.name, c.events) for c in configs])}
    return html.read_bytes(), js.read_bytes(), frames, [trends(c.events, c.batches) for c in configs]


def _same_as_passes(data_dir, tmp_path, monkeypatch, chunk=7):
    old = _outputs(_configs(data_dir, monkeypatch, "", chunk), tmp_path, "passes")
    new = _outputs(_configs(data_dir, monkeypatch, "values", chunk), tmp_path, "one")
    assert old[0] == new[0] and old[1] == new[1]  # report.html (figures included) and report.json: same bytes
    for k in old[2]:
        pd.testing.assert_frame_equal(old[2][k], new[2][k], obj=k)
    assert old[3] == new[3]
    return new


@pytest.mark.parametrize("fixture", FIXTURES)
def test_report_same_bytes_on_fixtures(fixture, request, tmp_path, monkeypatch):
    _same_as_passes(request.getfixturevalue(fixture), tmp_path, monkeypatch)


def test_report_same_bytes_failed_and_exhausted(tmp_path, monkeypatch):
    """Excluded batches (failed and exhausted fetches): with op records the figures read the files again,
    without any the kept values serve; the same bytes either way."""
    for legacy in (False, True):
        run = write_outcome_run(tmp_path / f"o{legacy}", legacy=legacy)
        _same_as_passes(run, tmp_path / f"out{legacy}", monkeypatch)


def test_report_same_bytes_several_configs_parallel(tmp_path, synth_native, straggler_run, monkeypatch):
    """Parts of a parallel scan: the per-batch sums and value files merged in file order; no file left."""
    shutil.copytree(synth_native, tmp_path / "runs" / "a")
    shutil.copytree(straggler_run, tmp_path / "runs" / "b")
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv("LOTUS_SPILL_DIR", str(spill))
    monkeypatch.setenv("LOTUS_JOBS", "2")
    monkeypatch.setattr("lotus.query.parallel.PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr("lotus.query.parallel.PART_BYTES", 1 << 12)
    _same_as_passes(tmp_path / "runs", tmp_path, monkeypatch, chunk=4099)
    import gc

    gc.collect()
    assert not list(spill.iterdir())


def test_large_run_sampled(tmp_path, monkeypatch):
    """More than 20,000 calls of its ops: the default sample is picked from the kept values."""
    write_native(tmp_path / "big", PipelineSpec(n_batches=700, batch_size=32, n_workers=2, seed=7))
    _same_as_passes(tmp_path / "big", tmp_path, monkeypatch, chunk=4099)


@pytest.mark.parametrize("command", [["report", "-o", "{out}/r.html"], ["plot", "-o", "{out}", "--format", "png"]])
def test_one_pass_over_the_files(command, tmp_path, synth_epochs, opened, monkeypatch):
    """Every trace file is read once by ``lotus report`` and ``lotus plot`` (trends, op samples and totals
    included). (Excluded batches, failed fetches, that hold op records still take the passes that leave
    them out: not here.)"""
    shutil.copytree(synth_epochs, tmp_path / "runs" / "s")
    shutil.copytree(synth_epochs, tmp_path / "runs" / "t")
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_JOBS", "1")
    args = [a.format(out=tmp_path / "out") for a in command]
    r = CliRunner().invoke(cli, [args[0], "-d", str(tmp_path / "runs"), *args[1:]])
    assert r.exit_code == 0, r.output
    assert opened and set(opened.values()) == {1}, opened


def test_full_spill_disk_is_one_line(tmp_path, synth_epochs, monkeypatch):
    import lotus.query.opreduce as opreduce

    class Full:
        def __init__(self, fd, mode):
            import os

            os.close(fd)

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    monkeypatch.setenv("LOTUS_SPILL_DIR", str(tmp_path))
    monkeypatch.setattr(opreduce, "_open", Full)
    r = CliRunner().invoke(cli, ["report", "-d", str(synth_epochs), "-o", str(tmp_path / "out" / "r.html")])
    assert r.exit_code != 0
    line = [x for x in r.output.splitlines() if str(tmp_path) in x]
    assert len(line) == 1 and "no space left" in line[0], r.output
