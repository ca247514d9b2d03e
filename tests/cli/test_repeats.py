"""``lotus analyze throughput --repeats``: runs that repeat one configuration read together (issue 24: intervals
that match repeated runs, checked on the user's own job)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lotus.analysis.runspread import RUN_SPREAD, Reading, repeats
from lotus.trace.synthetic import PipelineSpec, write_native
from tests.cli.conftest import run


@pytest.fixture(autouse=True)
def _default_spread(monkeypatch):
    monkeypatch.delenv("LOTUS_RUN_SPREAD", raising=False)


def _runs(root, paces):
    """One synthetic run a pace (its per-item and step costs scaled): separate runs of one job."""
    for i, f in enumerate(paces):
        write_native(root / f"run{i}", PipelineSpec(n_batches=240, batch_size=8, n_workers=2, epochs=1,
                                                    load_ms=2.0 * f, ops_ms={"Decode": 6.0 * f}, step_ms=1.0,
                                                    jitter=0.05, seed=i))
    return root


def test_runs_of_one_configuration_read_together(tmp_path):
    root = _runs(tmp_path, [1.0, 1.0, 1.1, 0.95])
    doc = json.loads(run("analyze", "throughput", "-d", root, "--repeats", "--json").stdout)
    rates = [doc["configs"][f"run{i}"]["samples_per_s"] for i in range(4)]
    r = doc["repeats"]
    x = np.array(rates)
    assert r["runs"] == 4 and r["mean_samples_per_s"] == pytest.approx(x.mean())
    hw = 3.182 * x.std(ddof=1) / 2  # t(3) x sd / sqrt(4)
    assert r["mean_ci95"] == pytest.approx([x.mean() - hw, x.mean() + hw], rel=1e-3)
    assert r["rel_sd"] == pytest.approx(x.std(ddof=1) / x.mean())
    assert 0 < r["beyond_rel_sd"] <= r["rel_sd"]  # the paces differ by ~6%: more than each run's own interval
    held = sum(c["ci95"][0] <= np.delete(x, i).mean() <= c["ci95"][1]
               for i, c in enumerate(doc["configs"][f"run{k}"] for k in range(4)))
    assert r["held"] == held < 4 and r["dof"] == 3 and r["with_interval"] == 4 and r["coverage"] == held / 4
    hws = [(c["ci95"][1] - c["ci95"][0]) / 2 for c in doc["configs"].values()]
    assert r["width_ratio"] == pytest.approx(np.mean(hws) / (3.182 * x.std(ddof=1)), rel=1e-3)
    text = run("analyze", "throughput", "-d", root, "--repeats").stdout
    assert f"repeats (4 runs of one configuration): mean {x.mean():,.1f} samples/s" in text
    assert f"LOTUS_RUN_SPREAD={r['beyond_rel_sd']:.2g} gives a single run" in text
    assert f"holds the mean of the others in {held} of 4 runs ({held / 4:.0%})" in text
    assert f"is {r['width_ratio']:.2f}x the runs' own 95% spread" in text


def test_identical_runs_spread_nothing_beyond_their_intervals():
    rs = [Reading(f"r{i}", 100.0 + d, (95.0 + d, 105.0 + d), 0.04) for i, d in enumerate([0.0, 0.5, -0.5])]
    r = repeats(rs)
    from lotus.commands.analyze_throughput import repeats_lines

    assert "single runs' intervals need no more" in repeats_lines(r)[1]
    assert r["beyond_rel_sd"] == 0.0 and r["held"] == 3 and r["coverage"] == 1.0 and r["default_rel_sd"] == RUN_SPREAD
    assert r["width_ratio"] == pytest.approx(5.0 / (4.303 * 0.5), rel=1e-3)  # +-5 against t(2) x sd 0.5
    assert r["rel_sd"] == pytest.approx(0.5 / 100.0) and math.isclose(r["mean_samples_per_s"], 100.0)
    assert repeats(rs[:1]) is None and repeats([rs[0], Reading("x", None)]) is None


def test_fewer_than_two_rated_runs_is_one_line_and_exit_1(tmp_path):
    root = _runs(tmp_path, [1.0])
    r = run("analyze", "throughput", "-d", root, "--repeats", ok=False)
    assert r.exit_code == 1
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("lotus:")]
    assert "--repeats needs two runs with a rate or more" in line and "(found 1)" in line
