"""Trends per epoch and per time bucket (lotus report): both engines agree; a golden for a small run."""

from __future__ import annotations

import json

import pytest

from lotus.analysis.runs import load_config
from lotus.analysis.trends import trends
from tests.cli.conftest import _round, check_golden, run


def _trends(path, engine, monkeypatch, **kw):
    monkeypatch.setenv("LOTUS_ENGINE", engine)
    c = load_config(path, engine="auto")
    return trends(c.events, c.batches, **kw)


def test_trends_golden_and_engines_agree(synth_epochs, monkeypatch):
    mem = _trends(synth_epochs, "memory", monkeypatch)
    assert _round(_trends(synth_epochs, "scan", monkeypatch)) == _round(mem)
    assert [r["epoch"] for r in mem["per_epoch"]] == [0, 1, 2]
    assert sum(r["batches"] for r in mem["per_bucket"]) == sum(r["batches"] for r in mem["per_epoch"]) == 30
    check_golden("trends_epochs.json", json.dumps(mem, indent=1) + "\n")


def test_engines_agree_exactly_with_failed_and_exhausted_fetches(tmp_path, monkeypatch):
    """Op totals per epoch and per bucket leave out the ops of failed and exhausted fetches on both
    engines (a scanned run reads its op records again for them)."""
    from lotus.trace import chunks
    from tests.trace.outcome_run import write_outcome_run

    r = write_outcome_run(tmp_path / "o")
    mem = _trends(r, "memory", monkeypatch, bucket_s=0.01)
    monkeypatch.setattr(chunks, "CHUNK_RECORDS", 7)
    assert _trends(r, "scan", monkeypatch, bucket_s=0.01) == mem
    assert any(b["slowest_op"] for b in mem["per_bucket"]) and any(e["slowest_op"] for e in mem["per_epoch"])


def test_bucket_width(synth_epochs, monkeypatch):
    t = _trends(synth_epochs, "memory", monkeypatch, bucket_s=0.05)
    assert t["bucket_s"] == 0.05 and all(r["start_s"] == pytest.approx(i * 0.05) for i, r in
                                         enumerate(t["per_bucket"]))


def test_report_has_trend_tables(synth_epochs, tmp_path):
    run("report", "-d", synth_epochs, "-o", tmp_path / "r.html", "--no-figures")
    html = (tmp_path / "r.html").read_text()
    assert "Trend per epoch" in html and "Trend over time" in html
    over_time = html[html.index("Trend over time"):]
    assert "slowest op" in over_time[: over_time.index("</table>")]
    doc = json.loads((tmp_path / "report.json").read_text())
    (c,) = doc["configs"].values()
    assert len(c["trends"]["per_epoch"]) == 3
