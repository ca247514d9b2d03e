"""The CLI says how many fetches were no batch (exhausted) or failed, and times only the batches."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import run
from tests.trace.outcome_run import write_outcome_run

EXHAUSTED_NOTE = "2 exhausted fetches (IterableDataset end), not batches"
FAILED_NOTE = "1 failed batch (the fetch raised; r0/w1: 1), left out of the timings"


@pytest.fixture(scope="module")
def outcome_dir(tmp_path_factory):
    return write_outcome_run(tmp_path_factory.mktemp("cli-outcomes") / "run")


def test_stats_counts_batches_and_names_the_rest(outcome_dir):
    out = run("analyze", "stats", "-d", outcome_dir).output
    assert "run  (6 batches;" in out
    assert f"not in these numbers: {FAILED_NOTE}; {EXHAUSTED_NOTE}" in out
    doc = json.loads(run("analyze", "stats", "-d", outcome_dir, "--json").output)["configs"]["run"]
    assert doc["batch_preprocessing_ms"]["count"] == 6
    assert doc["outcomes"]["exhausted"] == 2 and doc["outcomes"]["failed_by_worker"] == {"r0/w1": 1}


def test_info_verdict_wait_viz_diff_report(outcome_dir, tmp_path):
    out = run("info", "-d", outcome_dir).output
    assert "batches prepared 6, consumed 6" in out
    assert f"also: {FAILED_NOTE}; {EXHAUSTED_NOTE}; 2 indices dispatched without a batch" in out
    assert "exhausted 2" in out  # the event kind in the event counts
    out = run("analyze", "verdict", "-d", outcome_dir).output
    assert "(6 batches)" in out and EXHAUSTED_NOTE in out
    assert EXHAUSTED_NOTE in run("analyze", "wait", "-d", outcome_dir).output
    out = run("viz", "-d", outcome_dir, "-o", tmp_path / "t.json").output
    assert "(of which 2 exhausted-fetch markers, 1 failed-fetch slices)" in out and "6 batch flows" in out
    out = run("diff", outcome_dir, outcome_dir).output
    assert "batches matched 6" in out and "failed batches (not compared): A 1, B 1" in out
    run("report", "-d", outcome_dir, "-o", tmp_path / "r.html", "--no-figures")
    assert EXHAUSTED_NOTE in (tmp_path / "r.html").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["configs"]["run"]["outcomes"]["failed"] == 1
