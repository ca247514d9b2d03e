"""The CPU allocator: a pure function over known throughput curves."""

from __future__ import annotations

import itertools

import pytest

from lotus.submit.allocator import AllocationError, allocate, contiguous_sets, equal_split


def linear_until(cap_cpus: float, per_cpu: float = 100.0):
    """samples/s grows by ``per_cpu`` per CPU up to ``cap_cpus`` CPUs, then stays flat (a GPU-bound ceiling)."""
    return lambda n: per_cpu * min(n, cap_cpus)


def concave(scale: float, half: float):
    return lambda n: scale * n / (n + half)


def best_total(curves, total, normalize=False):
    """Exhaustive best split (for checking greedy on small cases)."""
    names = list(curves)
    best = None
    for combo in itertools.product(range(1, total + 1), repeat=len(names)):
        if sum(combo) > total:
            continue
        peak = {a: max(curves[a](n) for n in range(1, total - len(names) + 2)) for a in names}  # reachable
        val = sum(curves[a](n) / (peak[a] if normalize else 1) for a, n in zip(names, combo, strict=True))
        if best is None or val > best[0] + 1e-9:
            best = (val, dict(zip(names, combo, strict=True)))
    return best


def test_cpus_go_where_they_raise_throughput():
    curves = {"cpu_hungry": linear_until(10), "gpu_bound": linear_until(2), "mid": linear_until(4)}
    alloc = allocate(curves, 16)
    assert alloc == {"cpu_hungry": 10, "gpu_bound": 2, "mid": 4}  # exactly what each can use


def test_scarce_cpus_are_shared_and_everyone_gets_one():
    curves = {"a": linear_until(10), "b": linear_until(10), "c": linear_until(1)}
    alloc = allocate(curves, 6)
    assert alloc["c"] == 1 and alloc["a"] + alloc["b"] == 5 and min(alloc.values()) >= 1
    assert abs(alloc["a"] - alloc["b"]) <= 1  # ties go to the app with fewer CPUs


def test_idle_cpus_stay_free_when_nobody_gains():
    alloc = allocate({"a": linear_until(2), "b": linear_until(3)}, 32)
    assert alloc == {"a": 2, "b": 3}


@pytest.mark.parametrize("normalize", [False, True])
def test_greedy_matches_the_exhaustive_optimum_on_concave_curves(normalize):
    curves = {"a": concave(1000, 2), "b": concave(400, 6), "c": concave(2500, 1)}
    alloc = allocate(curves, 10, normalize=normalize, min_gain=0.0, fair=False)
    peak = {a: max(curves[a](n) for n in range(1, 10 - 3 + 2)) for a in curves}  # the most it can get
    got = sum(curves[a](n) / (peak[a] if normalize else 1) for a, n in alloc.items())
    assert got == pytest.approx(best_total(curves, 10, normalize)[0], rel=1e-9)


def test_normalized_gains_do_not_favour_cheap_samples():
    # same shape, 100x the samples/s: raw gains would hand every CPU to "tokens"
    curves = {"images": linear_until(4, 10.0), "tokens": linear_until(4, 1000.0)}
    assert allocate(curves, 6) == {"images": 3, "tokens": 3}
    raw = allocate(curves, 6, normalize=False, fair=False)
    assert raw["tokens"] == 4 and raw["images"] == 2
    assert allocate(curves, 6, normalize=True, fair=False) == {"images": 3, "tokens": 3}


def test_lookahead_crosses_a_plateau():
    # b gains nothing from a 2nd CPU but a lot from the 3rd (e.g. workers come in pairs)
    curves = {"a": linear_until(3, 10.0), "b": lambda n: {1: 100, 2: 100}.get(n, 300)}
    alloc = allocate(curves, 6, normalize=False)
    assert alloc["b"] == 3 and alloc["a"] == 3
    short = allocate(curves, 6, normalize=False, lookahead_cpus=1, fair=False)
    assert short["b"] == 1  # without the look-ahead greedy never crosses it


def test_fair_floors_never_starve_the_app_that_scales_furthest():
    # the curves lotus.model gave on the H100 host (issue 10.4): a decoding-bound app that scales linearly
    # (its 2nd CPU adds little: main process + 1 worker on 2 CPUs) next to two that saturate. Gains as shares
    # of each app's own peak starved the linear one (1 CPU); the fair floor keeps its equal-share rate.
    r18 = dict(zip(range(1, 17), [176, 186, 370, 553, 735, 916, 1035, 1155, 1311, 1467, 1604, 1742, 1866, 1990,
                                  2114, 2238], strict=True))
    r50 = dict(zip(range(1, 17), [195, 215, 400, 582, 726, 870, 957, 1043, 1146, 1248, 1304, 1360, 1355, 1350,
                                  1348, 1347], strict=True))
    r152 = dict(zip(range(1, 17), [86, 86, 167, 248, 315, 381, 409, 437, 483, 528, 537, 546, 542, 540, 539, 538],
                    strict=True))
    curves = {"r18": r18.get, "r50": r50.get, "r152": r152.get}
    alloc = allocate(curves, 16)
    share = equal_split(list(curves), 16)
    assert all(curves[a](alloc[a]) >= 0.98 * curves[a](share[a]) for a in curves)
    assert sum(alloc.values()) == 16
    assert allocate(curves, 16, normalize=True, fair=False)["r18"] == 1  # the starvation the floor prevents


def test_fair_floor_gives_a_saturated_app_only_what_it_uses():
    curves = {"cpu_hungry": linear_until(16), "gpu_bound": linear_until(2), "mid": linear_until(3)}
    assert allocate(curves, 15) == {"cpu_hungry": 10, "gpu_bound": 2, "mid": 3}


def test_minimums_and_errors():
    alloc = allocate({"ddp": linear_until(1), "one": linear_until(1)}, 5, minimum={"ddp": 2})
    assert alloc == {"ddp": 2, "one": 1}
    with pytest.raises(AllocationError, match="need at least 3 CPUs, only 2"):
        allocate({"a": linear_until(4), "b": linear_until(4)}, 2, minimum={"a": 2})
    assert allocate({}, 8) == {}
    assert allocate({"none": lambda n: None, "nan": lambda n: float("nan")}, 4) == {"none": 1, "nan": 1}


def test_equal_split():
    assert equal_split(["a", "b", "c"], 8) == {"a": 3, "b": 3, "c": 2}
    assert equal_split(["a", "b"], 3, minimum={"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(AllocationError):
        equal_split(["a", "b", "c"], 2)


def test_contiguous_sets_are_disjoint_and_contiguous_when_possible():
    sets = contiguous_sets({"a": 4, "b": 2, "c": 2}, list(range(8)))
    assert sets == {"a": [0, 1, 2, 3], "b": [4, 5], "c": [6, 7]}
    # holes (CPUs taken by others): each app takes the smallest run that holds it
    sets = contiguous_sets({"a": 3, "b": 2}, [0, 1, 4, 5, 6, 9, 10, 11, 12])
    assert sets["b"] == [0, 1] and sets["a"] == [4, 5, 6]
    # no run long enough: pieces, still disjoint
    sets = contiguous_sets({"a": 4, "b": 1}, [0, 2, 3, 6, 7])
    assert len(sets["a"]) == 4 and len(sets["b"]) == 1 and not set(sets["a"]) & set(sets["b"])
    with pytest.raises(ValueError):
        contiguous_sets({"a": 3}, [0, 1])
