"""CPU allocation among concurrent apps: pure functions, no processes, no model fitting.

:func:`allocate` is Synergy's greedy scheduler applied to CPUs, with Synergy's fairness rule: no app is
worse off than under an equal split. Every app first gets its *fair floor*: the fewest CPUs at which its
predicted rate reaches (within 2 %) the rate it would have with an equal share (``fair=True``, the
default); then the remaining CPUs go one at a time to the app whose throughput gains most from one more
CPU, in samples/s (the total the machine delivers). An app that saturates early (GPU-bound) thus gives
the CPUs it cannot use to the apps that can, and the app that scales furthest is never starved.
``normalize=True`` compares gains as a share of each app's own best rate instead (so that an app of cheap
samples does not win the extra CPUs just because its samples/s are large numbers). A look-ahead over the
next CPUs (the best *average* gain per CPU over the next k) lets an app whose curve has a plateau (no
gain from 1 more CPU, a large gain from 2) still get CPUs. CPUs that no app gains from stay free.

:func:`contiguous_sets` turns the sizes into CPU lists, contiguous wherever the free CPUs allow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

Curve = Callable[[int], float]  # CPUs -> samples/s

MIN_GAIN = 0.01  # a CPU must add >= 1 % of the app's best rate
FAIR_SLACK = 0.02  # fair floor: the fewest CPUs within 2 % of the equal-share rate


class AllocationError(ValueError):
    """The apps' minimums do not fit in the CPUs given."""


def _memo(curve: Curve) -> Curve:
    cache: dict[int, float] = {}

    def f(n: int) -> float:
        if n not in cache:
            v = curve(n)
            cache[n] = float(v) if v is not None and math.isfinite(v) else 0.0  # None/NaN: no throughput
        return cache[n]

    return f


def allocate(curves: Mapping[Hashable, Curve], total_cpus: int, *, minimum: Mapping[Hashable, int] | None = None,
             fair: bool = True, normalize: bool = False, min_gain: float | None = None,
             lookahead_cpus: int | None = None) -> dict[Hashable, int]:
    """CPUs per app: fair floors, then greedy by marginal throughput (see the module doc).

    ``curves``: app -> f(cpus) -> samples/s (called with 1..total_cpus; results are cached).
    ``minimum``: app -> CPUs it must get at least (default 1). ``fair``: start from the fair floors
    (else from the minimums). ``min_gain``: the smallest gain a CPU must bring, as a share of the app's
    best rate (default 1 %).
    ``lookahead_cpus``: how far the look-ahead goes (default: all remaining CPUs).
    Raises :class:`AllocationError` when the minimums exceed ``total_cpus``.
    """
    apps = list(curves)
    if not apps:
        return {}
    total = int(total_cpus)
    mins = {a: max(1, int((minimum or {}).get(a, 1))) for a in apps}
    if sum(mins.values()) > total:
        raise AllocationError(f"{len(apps)} app(s) need at least {sum(mins.values())} CPUs, only {total} available")
    f = {a: _memo(curves[a]) for a in apps}
    peak = {a: max(f[a](n) for n in range(mins[a], total - sum(mins.values()) + mins[a] + 1)) for a in apps}
    # gains are compared in samples/s, or as shares of each app's peak; min_gain is a share of the peak
    scale = {a: (1.0 / peak[a] if peak[a] > 0 else 0.0) if normalize else 1.0 for a in apps}
    share = MIN_GAIN if min_gain is None else float(min_gain)
    threshold = {a: share * peak[a] * scale[a] for a in apps}
    alloc = fair_floors(f, total, mins) if fair else dict(mins)
    free = total - sum(alloc.values())
    while free > 0:
        best_app, best_gain = None, 0.0
        for a in apps:
            n, base = alloc[a], f[a](alloc[a])
            reach = free if lookahead_cpus is None else min(free, max(1, int(lookahead_cpus)))
            gain = max((f[a](n + k) - base) / k for k in range(1, reach + 1)) * scale[a]
            if gain < threshold[a] or gain <= 0:
                continue
            if best_app is None or gain > best_gain or (gain == best_gain and alloc[a] < alloc[best_app]):
                best_app, best_gain = a, gain
        if best_app is None:
            break
        alloc[best_app] += 1
        free -= 1
    return alloc


def fair_floors(f: Mapping[Hashable, Curve], total: int, mins: Mapping[Hashable, int]) -> dict[Hashable, int]:
    """Per app, the fewest CPUs (>= its minimum, <= its equal share) whose rate is within FAIR_SLACK of the
    rate at its equal share: what the app needs so that no allocation leaves it worse off than a split."""
    share = equal_split(list(f), total, minimum=mins)
    out = {}
    for a, n_eq in share.items():
        target = f[a](n_eq) * (1.0 - FAIR_SLACK)
        n = mins[a]
        while n < n_eq and f[a](n) < target:
            n += 1
        out[a] = n
    return out


def equal_split(apps: Sequence[Hashable], total_cpus: int, *,
                minimum: Mapping[Hashable, int] | None = None) -> dict[Hashable, int]:
    """The same number of CPUs for every app (the first ones get the remainder), at least their minimum."""
    if not apps:
        return {}
    mins = {a: max(1, int((minimum or {}).get(a, 1))) for a in apps}
    if sum(mins.values()) > total_cpus:
        raise AllocationError(f"{len(apps)} app(s) need at least {sum(mins.values())} CPUs, "
                              f"only {total_cpus} available")
    each, extra = divmod(int(total_cpus), len(apps))
    out = {a: each + (1 if i < extra else 0) for i, a in enumerate(apps)}
    short = sum(max(0, mins[a] - out[a]) for a in apps)
    for a in sorted(apps, key=lambda x: -out[x]):  # take back from the largest to lift the minimums
        while short and out[a] > mins[a]:
            out[a] -= 1
            short -= 1
    return {a: max(out[a], mins[a]) for a in apps}


def _runs(cpus: Sequence[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for c in sorted(set(cpus)):
        if out and c == out[-1][-1] + 1:
            out[-1].append(c)
        else:
            out.append([c])
    return out


def contiguous_sets(sizes: Mapping[Hashable, int], cpus: Sequence[int]) -> dict[Hashable, list[int]]:
    """Disjoint CPU lists of the given sizes taken from ``cpus``, contiguous where possible.

    Largest apps first; each takes the smallest run of consecutive free CPUs that holds it (from its low
    end), or, when no run is long enough, CPUs from the longest runs. ValueError when the sizes exceed
    the CPUs.
    """
    if sum(sizes.values()) > len(set(cpus)):
        raise ValueError(f"{sum(sizes.values())} CPUs asked for, {len(set(cpus))} given")
    runs = _runs(cpus)
    out: dict[Hashable, list[int]] = {}
    order = sorted(sizes, key=lambda a: -sizes[a])  # stable: equal sizes keep the apps' order
    for app in order:
        need = int(sizes[app])
        fits = [r for r in runs if len(r) >= need]
        if fits:
            run = min(fits, key=len)
            out[app], run[:] = run[:need], run[need:]
        else:
            got: list[int] = []
            for run in sorted(runs, key=len, reverse=True):
                take = min(need - len(got), len(run))
                got += run[:take]
                run[:] = run[take:]
                if len(got) == need:
                    break
            out[app] = sorted(got)
        runs = [r for r in runs if r]
    return {a: out[a] for a in sizes}
