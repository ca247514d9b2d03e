"""The planner: the cap is respected, the search finds what brute force finds, infeasible caps."""

from __future__ import annotations

import itertools

import pytest

from lotus.model.power import TenantLoad, fit_power_model
from lotus.power.plan import _evaluate, format_plan, make_plan, search_mps, search_time_sliced
from tests.power.conftest import make_table

CLOCKS = [None, 1005.0, 1410.0, 1755.0, 1980.0]


@pytest.fixture(scope="module")
def pm():
    return fit_power_model(make_table())


@pytest.mark.parametrize("cap", [120, 200, 300, 450, 700, 2000])
def test_cap_respected_and_time_sliced_search_is_exact(pm, cap):
    best, low = search_time_sliced(pm, cap, CLOCKS, [1, 4, 16, 64, 128, 256], 4)
    brute = None
    for n, b, f in itertools.product(range(1, 5), [1, 4, 16, 64, 128, 256], CLOCKS):
        clock = pm.default_clock_mhz(b, n) if f is None else f
        pr = pm.predict(b, n, clock)
        if pr.power_w <= cap and (brute is None or pr.samples_per_s > brute):
            brute = pr.samples_per_s
    if brute is None:
        assert best is None
    else:
        assert best.power_w <= cap and best.samples_per_s == pytest.approx(brute)
    assert low.power_w <= (best.power_w if best else low.power_w)


def _brute_mps(pm, cap, batches, q, n_max):
    shares = [k * q / 100 for k in range(1, 100 // q + 1)]
    best = None
    for f in CLOCKS:
        for n in range(1, n_max + 1):
            for combo in itertools.combinations_with_replacement(itertools.product(batches, shares), n):
                if sum(s for _, s in combo) > 1 + 1e-9:
                    continue
                c = _evaluate(pm, "mps", f, [TenantLoad(b, s) for b, s in combo])
                if c.power_w <= cap and (best is None or c.samples_per_s > best.samples_per_s):
                    best = c
    return best


@pytest.mark.parametrize("cap", [120, 180, 250, 400, 800])
def test_mps_greedy_partitioning_close_to_brute_force(pm, cap):
    batches = [1, 16, 64, 256]
    found, _ = search_mps(pm, cap, CLOCKS, batches, 3, quantum_pct=25)
    brute = _brute_mps(pm, cap, batches, 25, 3)
    assert found is not None and brute is not None
    assert found.power_w <= cap
    assert sum(ld.share for ld in found.loads) <= 1 + 1e-9
    assert found.samples_per_s >= 0.95 * brute.samples_per_s


def test_plan_under_a_cap_lists_commands_and_runs_none(pm, monkeypatch):
    import subprocess

    def refuse(*a, **k):
        raise AssertionError("the planner must not run anything")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    table = make_table()
    plan = make_plan(pm, 300, supported_clocks=range(210, 1981, 15), table=table, gpu_index=1,
                     power_limit_range_w=(200.0, 700.0), tenant_command="python serve.py --batch {batch}")
    assert plan.feasible and plan.best.power_w <= 300
    assert plan.commands[0] == "sudo nvidia-smi -i 1 -pl 300"
    if plan.best.clock_mhz is not None:
        assert f"-lgc {plan.best.clock_mhz:.0f},{plan.best.clock_mhz:.0f}" in "\n".join(plan.commands)
    assert any("python serve.py --batch" in c for c in plan.commands)
    if plan.best.sharing == "mps":
        assert "nvidia-cuda-mps-control -d" in plan.commands
        assert any(c.startswith("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") for c in plan.commands)
    assert plan.measured is not None and plan.measured["gpu_idle_from_data_share"] == pytest.approx(0.02)
    text = "\n".join(format_plan(plan, "test"))
    assert "plan for toynet under 300 W" in text and "lotus runs none of them" in text
    d = plan.to_dict()
    assert d["best"]["tenants"] and d["feasible"] is True


def test_infeasible_cap_says_so_and_shows_the_lowest_power_configuration(pm):
    plan = make_plan(pm, 10, supported_clocks=range(210, 1981, 15))
    assert not plan.feasible
    assert plan.notes[0].startswith("no configuration is predicted under 10 W; the lowest predicted power is")
    lowest = min(
        _evaluate(pm, "time-sliced", f, [TenantLoad(b, 1 / n)] * n).power_w
        for n, b, f in itertools.product(range(1, 5), [1, 2, 4], [None, *range(510, 1981, 15)]))
    assert plan.best.power_w <= lowest + 1e-6
    assert plan.commands[0].startswith("# no configuration is predicted under 10 W")
    assert "no plan for toynet under 10 W" in format_plan(plan)[0]


def test_data_starved_nearest_point_is_reported(pm):
    table = make_table().assign(gpu_idle_from_data_share=0.4)
    plan = make_plan(pm, 400, table=table, sharing=("time-sliced",))
    assert any("waiting for data 40%" in n for n in plan.notes)


def test_clock_candidates_and_priors_note():
    pm1 = fit_power_model(make_table(clocks=(1980,)))
    plan = make_plan(pm1, 200, supported_clocks=range(210, 1981, 15), sharing=("time-sliced",))
    assert plan.best.clock_mhz is None or plan.best.clock_mhz >= 0.5 * pm1.clock_range_mhz[0]
    if plan.best.clock_mhz is not None and plan.best.clock_mhz < 0.9 * pm1.clock_range_mhz[0]:
        assert any("priors" in n for n in plan.notes)
    plan = make_plan(pm1, 5000)  # no supported clocks, one measured clock: default clocks only
    assert plan.feasible and plan.best.clock_mhz is None and not any("-lgc" in c for c in plan.commands)
