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
        # the loop of "a" waits 30% of every gap, "b"'s never
        return t.astype("int64"), np.full(len(t), float(batch)), gaps * 1e9 * (0.3 if rate == 400.0 else 0.0)

    data = {"a": handoffs(400.0, 0.0, 40.0, 16), "b": handoffs(100.0, 3.0, 30.0, 4)}
    monkeypatch.setattr(trial, "_handoffs", lambda d: data[d])
    r = trial.window_rates({"a": "a", "b": "b"}, warmup_s=5.0, plan="x")
    assert r.error is None and r.window_s == pytest.approx(30.0 - 8.0, abs=0.5)
    assert r.ci95[0] <= 500.0 <= r.ci95[1] and r.samples_per_s == pytest.approx(500.0, rel=0.02)
    assert r.apps["a"]["samples_per_s"] == pytest.approx(400.0, rel=0.02)
    assert r.apps["a"]["wait_share"] == pytest.approx(0.3, abs=0.01) and r.apps["b"]["wait_share"] == 0.0
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
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves, refine=False)
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
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves, refine=False)
    assert rec["chosen"] == "disjoint" and chosen is plan


def _app_rates(plan, rates: dict, waits: dict):
    apps = {p.name: {"samples_per_s": rates[p.name], "ci95": [rates[p.name] * 0.97, rates[p.name] * 1.03],
                     "wait_share": waits.get(p.name)} for p in plan.apps}
    for p in plan.apps:
        a = apps[p.name]
        if p.name in plan.curves and p.cpus:
            a["predicted_samples_per_s"] = plan.curves[p.name](len(p.cpus))
    return trial.TrialRate("disjoint", sum(rates.values()), None, 20.0, apps=apps)


def test_refined_curves_cap_an_app_held_by_its_step_and_scale_a_data_bound_one(tmp_path):
    plan = _plan(tmp_path, trial_s=30.0)
    assert {p.name: len(p.cpus) for p in plan.apps if p.name in plan.curves} == {"hungry": 8, "light": 2}
    # hungry: 800 predicted at 8 CPUs, 400 measured with its loop hardly waiting: its step (a shared GPU) holds it
    d = _app_rates(plan, {"hungry": 400.0, "light": 100.0, "fixed": 50.0, "pinned": 50.0},
                   {"hungry": 0.02, "light": 0.6})
    fixed, notes = trial.refined_curves(plan.curves, plan, d)
    assert [fixed["hungry"](n) for n in (2, 4, 8, 10)] == [200.0, 400.0, 400.0, 400.0]
    # light waited 60%: its pipeline gave half of what its curve said: the curve scaled by 0.5
    assert [fixed["light"](n) for n in (1, 2, 5)] == [50.0, 100.0, 100.0]
    assert len(notes) == 2 and "capped" in notes[0] and "x 0.50" in notes[1]
    # the second round: hungry needs only 4 CPUs now (its capped curve gains nothing beyond)
    cand, _ = trial.refined_plan(plan, plan.curves, d)
    sizes = {p.name: len(p.cpus) for p in cand.apps if p.name in plan.curves}
    assert sizes == {"hungry": 4, "light": 2}
    assert all(p.cpus_source == "model, refined by the trial" for p in cand.apps if p.name in plan.curves)
    # a trial that measured what the curves said changes nothing: no refined plan
    same = _app_rates(plan, {"hungry": 800.0, "light": 200.0, "fixed": 50.0, "pinned": 50.0}, {"hungry": 0.5})
    assert trial.refined_plan(plan, plan.curves, same)[0] is None
    # no measured rate: the curve is kept as it is
    none = _app_rates(plan, {"hungry": 0.0, "light": 200.0, "fixed": 1.0, "pinned": 1.0}, {})
    assert trial.refined_curves(plan.curves, plan, none)[0]["hungry"] is plan.curves["hungry"]


def test_run_trials_runs_the_refined_plan_when_it_differs_and_keeps_the_highest_total(tmp_path, monkeypatch):
    plan = _plan(tmp_path, trial_s=30.0)
    ran = []

    class FakeExecutor:
        name = "local"

        def run(self, specs, *, concurrent, delays_s=None):
            ran.append(list(specs))
            return [Outcome(s.name, s.trace_dir, 124, 30.0, traced=True) for s in specs]

    totals = {"disjoint": 600.0, "shared": 620.0, "refined": 700.0}

    def fake_window(dirs, warmup_s, plan="", workers=None):
        if plan == "refined":
            assert workers["hungry"] == 3  # 4 CPUs: 3 workers
        rates = {"hungry": 400.0, "light": 100.0, "fixed": 50.0, "pinned": 50.0}
        apps = {n: {"samples_per_s": rates[n], "ci95": [rates[n] - 5, rates[n] + 5],
                    "wait_share": 0.02 if n == "hungry" else 0.6} for n in dirs}
        tot = totals[plan]
        if tot is None:
            return trial.TrialRate(plan, None, None, 0.0, error="b: no batch was consumed")
        return trial.TrialRate(plan, tot, (tot - 10, tot + 10), 20.0, apps=apps)

    monkeypatch.setattr(trial, "window_rates", fake_window)
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves)
    assert [s.trace_dir.split("/trials/")[1].split("/")[0] for s in (r[0] for r in ran)] == \
        ["disjoint", "shared", "refined"]
    assert rec["chosen"] == "refined" and {p.name: len(p.cpus) for p in chosen.apps if p.cpus}["hungry"] == 4
    assert "refined/disjoint 1.167x" in rec["why"] and "refined/shared" in rec["why"]
    assert len(rec["refine_notes"]) == 2 and rec["refined"]["plan"] == "refined"
    # the refined trial is checked against the corrected curves: hungry capped at 400, measured 400
    assert rec["refined"]["apps"]["hungry"]["model_error"] == pytest.approx(0.0)
    text = "\n".join(trial.trial_lines(rec))
    assert "second allocation round" in text and "refined:" in text and "chosen: refined" in text
    assert "loop waited 2%" in text
    # sharing measured highest: the apps share, whatever the rounds said
    totals["shared"] = 900.0
    ran.clear()
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves)
    assert rec["chosen"] == "shared" and len(ran) == 3
    # the refined plan without a rate: the better of the other two
    totals.update(shared=620.0, refined=None)
    chosen, rec = trial.run_trials(plan, FakeExecutor(), 30.0, curves=plan.curves)
    assert rec["chosen"] == "shared" and "the refined trial gave no rate" in rec["why"]
    totals.update(disjoint=700.0)
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
