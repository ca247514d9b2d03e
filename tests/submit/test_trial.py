"""workers=auto side-by-side trials: the model's disjoint sets against sharing every core (lotus.submit.trial)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from lotus.submit import trial
from lotus.submit.apps import read_apps
from lotus.submit.jobs import Outcome
from lotus.submit.plan import PlanOptions, build_plan
from tests.submit.conftest import lotus, tiny, write_csv

POOL = list(range(16))


def _plan(tmp_path, **kw):
    rows = [f'hungry,"{tiny()}",auto,', f'light,"{tiny()}",auto,', f'fixed,"{tiny()}",3,', f'pinned,"{tiny()}",1,14-15']
    apps = read_apps(write_csv(tmp_path / "apps.csv", "name,command,workers,cpus", *rows))
    opts = PlanOptions(out_dir=tmp_path / "out", concurrent=True, cpus=POOL, **kw)
    curves = {"hungry": lambda n: 100.0 * min(n, 8), "light": lambda n: 100.0 * min(n, 2)}
    return build_plan(apps, opts, curves)


def _rate(plan, total, hw, apps=None):
    return trial.TrialRate(plan, total, None if hw is None else (total - hw, total + hw), 20.0, apps=apps or {})


def test_shared_twin_unpins_the_auto_apps_with_every_core_and_keeps_csv_sets(tmp_path):
    plan = _plan(tmp_path)
    shared = trial.shared_plan(plan)
    by = {p.name: p for p in shared.apps}
    for name in ("hungry", "light"):
        assert by[name].cpus is None and by[name].workers == 15 and by[name].cpus_source == "shared"
    assert by["fixed"].cpus is None  # pinned only to keep the sets disjoint
    assert by["pinned"].cpus == [14, 15] and by["pinned"].cpus_source == "csv"
    # the disjoint plan itself is untouched
    assert len({p.name: p for p in plan.apps}["hungry"].cpus) == 8


@pytest.mark.parametrize("disjoint, shared, keep, noise", [
    ((1200.0, 30.0), (1000.0, 30.0), True, "beyond"),     # clearly better: the model's sets
    ((1030.0, 30.0), (1000.0, 30.0), True, "within"),     # the higher of two within noise
    ((990.0, 30.0), (1000.0, 30.0), False, "within"),
    ((800.0, 30.0), (1000.0, 30.0), False, "beyond"),     # pinning costs: share
    ((1200.0, None), (1000.0, 30.0), True, "no interval"),
])
def test_the_higher_measured_total_runs_and_the_text_says_if_beyond_noise(disjoint, shared, keep, noise):
    ok, why = trial.better(_rate("disjoint", *disjoint), _rate("shared", *shared))
    assert ok is keep and noise in why
    assert ("pay" in why) is keep and "x (difference" in why


def test_start_up_allowance_comes_from_the_probes():
    assert trial.startup_s([{"wall_s": 12.0, "exit_code": 0}, {"wall_s": 31.0, "exit_code": 0},
                            {"wall_s": 99.0, "exit_code": 1}]) == 31.0
    assert trial.startup_s([{"wall_s": 500.0, "exit_code": 0}]) == trial.MAX_STARTUP_S
    assert trial.startup_s([]) == trial.STARTUP_S


def test_a_trial_without_a_rate_shares():
    ok, why = trial.better(trial.TrialRate("disjoint", None, None, 0.0, error="a: no batch was consumed"),
                           _rate("shared", 1000.0, 10.0))
    assert not ok and "no batch was consumed" in why


def test_window_rates_sum_the_apps_over_their_common_window(monkeypatch):
    """Two apps at known rates, started 3 s apart: the total over the window where both ran."""
    rng = np.random.default_rng(1)

    def handoffs(rate, start_s, end_s, batch):
        gaps = rng.normal(batch / rate, 0.05 * batch / rate, int((end_s - start_s) * rate / batch))
        t = (start_s + np.cumsum(gaps)) * 1e9
        return t.astype("int64"), np.full(len(t), float(batch))

    data = {"a": handoffs(400.0, 0.0, 40.0, 16), "b": handoffs(100.0, 3.0, 30.0, 4)}
    monkeypatch.setattr(trial, "_handoffs", lambda d: data[d])
    r = trial.window_rates({"a": "a", "b": "b"}, warmup_s=5.0, plan="x")
    assert r.error is None and r.window_s == pytest.approx(30.0 - 8.0, abs=0.5)
    assert r.ci95[0] <= 500.0 <= r.ci95[1] and r.samples_per_s == pytest.approx(500.0, rel=0.02)
    assert r.apps["a"]["samples_per_s"] == pytest.approx(400.0, rel=0.02)
    # apps that never ran together long enough: no rate, and why
    short = trial.window_rates({"a": "a", "b": "b"}, warmup_s=25.0)
    assert short.samples_per_s is None and "warm-up" in short.error


def test_run_trials_runs_both_plans_and_keeps_the_better(tmp_path, monkeypatch):
    plan = _plan(tmp_path, trial_s=30.0)
    ran = []

    class FakeExecutor:
        name = "local"

        def run(self, specs, *, concurrent, delays_s=None):
            assert concurrent
            ran.append(list(specs))
            return [Outcome(s.name, s.trace_dir, 124, 30.0, traced=True) for s in specs]

    totals = {"disjoint": (900.0, 20.0), "shared": (1000.0, 20.0)}

    def fake_window(dirs, warmup_s, plan="", workers=None):
        assert workers["hungry"] == (7 if plan == "disjoint" else 15)
        assert warmup_s == 7.5  # a quarter of a 30-s trial
        apps = {n: {"samples_per_s": 100.0, "ci95": [95.0, 105.0]} for n in dirs}
        return _rate(plan, *totals[plan], apps=apps)

    monkeypatch.setattr(trial, "window_rates", fake_window)
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves)
    assert [len(r) for r in ran] == [4, 4]
    # each app's limit: start-up (20 s without a probe) + warm-up + the trial
    assert all(s.kind == "trial" and s.timeout_s == 57.5 and "/trials/" in s.trace_dir for r in ran for s in r)
    assert {s.trace_dir.split("/trials/")[1].split("/")[0] for s in ran[0]} == {"disjoint"}
    assert rec["chosen"] == "shared" and chosen.apps[0].cpus is None and "trial" in chosen.notes[-1]
    # the model checked against the disjoint trial: 8 CPUs -> 800 predicted, 100 measured
    hungry = rec["disjoint"]["apps"]["hungry"]
    assert hungry["predicted_samples_per_s"] == 800.0 and hungry["model_error"] == pytest.approx(7.0)
    text = "\n".join(trial.trial_lines(rec))
    assert "chosen: shared" in text and "model 800.0 (+700.0%)" in text
    totals["disjoint"] = (1300.0, 20.0)
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves)
    assert rec["chosen"] == "disjoint" and chosen is plan


@pytest.mark.timeout(240)
def test_submit_runs_the_trials_end_to_end(tmp_path):
    """Real processes: two auto apps probed, both plans run side by side, the choice and its figures in
    submit.json and the text."""
    csv = write_csv(tmp_path / "apps.csv", "name,command,workers,steps",
                    f'a,"{tiny("--n", 64, "--forever", "--sleep", 0.002)}",auto,',
                    f'b,"{tiny("--n", 64, "--forever", "--sleep", 0.004)}",auto,')
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = lotus("submit", csv, "--mode", "concurrent", "--out", out, "--probe-steps", 20, "--no-report",
              "--trial-seconds", 8, "--timeout", 12, "--cpus", "0-1")
    took = time.monotonic() - t0
    doc = json.loads((out / "submit.json").read_text())
    t = doc["trial"]
    assert t is not None and t["chosen"] in ("disjoint", "shared") and t["why"], doc
    for label in ("disjoint", "shared"):
        r_ = t[label]
        assert r_["plan"] == label and (Path(out) / "trials" / label / "a").is_dir()
        # both apps ran together long enough for a rate with its interval; the total is the apps' sum
        assert r_["error"] is None and r_["window_s"] >= 5.0, r_
        lo, hi = r_["ci95"]
        assert 0 < lo <= r_["samples_per_s"] <= hi
        assert sum(a["samples_per_s"] for a in r_["apps"].values()) == pytest.approx(r_["samples_per_s"])
    assert "workers=auto trials" in r.stdout and f"chosen: {t['chosen']}" in r.stdout
    # the higher measured total ran, with its own CPU sets
    higher = "disjoint" if t["disjoint"]["samples_per_s"] > t["shared"]["samples_per_s"] else "shared"
    assert t["chosen"] == higher
    plan = {p["name"]: p for p in doc["plan"]["apps"]}
    if higher == "shared":
        assert plan["a"]["cpus"] is None and plan["a"]["cpus_source"] == "shared"
    else:
        assert plan["a"]["cpus"] and plan["a"]["cpus_source"] == "model"
        assert t["disjoint"]["apps"]["a"]["model_error"] is not None  # the model checked at its CPUs
    assert any("workers=auto trial" in n for n in doc["plan"]["notes"])
    print(f"2 apps, probes + 2 trials + the run: {took:.1f} s")
