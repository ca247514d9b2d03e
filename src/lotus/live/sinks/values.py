"""What the sinks publish, from the live tailer's state: per (rank, loader), and for the run's main loader.

The numbers are those of ``lotus top`` (:func:`lotus.live.snapshot` over the window), except samples/s:
that is the project's one throughput measure (:func:`lotus.analysis.steady.steady_rate`) over the window's
hand-offs, so that it carries its 95% interval. The window's hand-offs run from the last one at or before
the window's start (or the hand-off of the run's prefetched ramp's last batch, if later: the ramp goes at
the step's pace, as :mod:`lotus.analysis.throughput` leaves it out) to the last one in the window. With no
hand-off in the window the rate is 0 (the loop received nothing); with one, it has no interval.

The main loader is the one whose batches the loop received most (summed over ranks), as
:func:`lotus.analysis.throughput.throughput` picks it; its ranks' rates add up (intervals in quadrature),
shares are averaged over ranks. The global step is the loop's batch count: the batches of the main loader
that the lowest rank received.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from lotus.analysis.runspread import combine
from lotus.analysis.steady import SteadyRate, steady_rate
from lotus.analysis.throughput import ramp_batches
from lotus.live.metrics import batch_samples
from lotus.live.state import SAMPLE_COUNT, SEC, LiveState
from lotus.trace import schema as S


@dataclass(frozen=True)
class LoaderValues:
    """One (rank, loader) over the window; ``rank`` -1: the main loader, ranks combined."""

    rank: int
    loader: int
    name: str
    host: str
    batches: int  # batches the loop received so far
    epoch: int | None
    samples_per_s: float | None
    ci95: tuple[float, float] | None
    wait_share: float | None  # share of the window the loop waited for data (0..1)
    worker_busy_share: float | None  # mean busy share of the loader's workers
    gpu_idle_share: float | None  # share of the window the GPU sat idle waiting for data (None: no CUDA events)
    slowest_op: str | None
    slowest_op_share: float | None  # its share of the workers' fetch time


@dataclass(frozen=True)
class RunValues:
    """One publish: what every sink writes."""

    step: int  # the loop's batch count (global step)
    wall_s: float  # time.time() of the publish
    live: bool  # the job is still running
    final: bool  # the last publish, after the job ended
    main: LoaderValues | None
    ranks: list[LoaderValues] = field(default_factory=list)  # the main loader, one per rank
    loaders: list[LoaderValues] = field(default_factory=list)  # every (rank, loader)


def window_rate(state: LiveState, key: tuple[int, int], now_ns: int, window_s: float) -> SteadyRate | None:
    """The steady rate of ``key``'s hand-offs over the window (see the module doc); None: fewer than two."""
    rank, loader = key
    rows = state.rows
    rows = rows[(rows["rank"] == rank) & (rows["loader"] == loader) & (rows["start"] <= now_ns)]
    consumed = rows[rows["kind"] == S.EV_CONSUMED]
    consumed = consumed[np.argsort(consumed["start"], kind="stable")]
    if len(consumed) == 0:
        return None
    desc = state.loaders.get(key, {})
    first_index = state.consumed.get(key, len(consumed)) - len(consumed)  # run index of consumed[0]
    in_window = np.flatnonzero(consumed["start"] > now_ns - int(window_s * SEC))
    if len(in_window) == 0:
        return None
    start = max(int(in_window[0]) - 1, ramp_batches(desc) - 1 - first_index, 0)
    t = consumed["start"][start:]
    if len(t) < 2:
        return None
    n = batch_samples(consumed[start:], rows[rows["kind"] == S.EV_COLLATE], rows[rows["kind"] == SAMPLE_COUNT],
                      desc.get("batch_size"))
    workers = desc.get("num_workers") if isinstance(desc.get("num_workers"), int) else 0
    return steady_rate(t, n, ramp=1, workers=workers)


def _busy(ld: dict) -> float | None:
    busy = [w["busy_share"] for w in ld["workers"] if w["busy_share"] is not None]
    return sum(busy) / len(busy) if busy else None


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _loader_values(state: LiveState, ld: dict, hosts: dict[int, str], now_ns: int, window_s: float,
                   rates: dict) -> LoaderValues:
    key = (ld["rank"], ld["loader"])
    rate = window_rate(state, key, now_ns, window_s)
    rates[key] = rate
    op = ld["slowest_op"] or {}
    value = rate.samples_per_s if rate is not None and rate.samples_per_s is not None else (
        0.0 if ld["batches_per_s"] == 0 else ld["samples_per_s"])
    return LoaderValues(rank=ld["rank"], loader=ld["loader"], name=str(ld["name"]), host=hosts.get(ld["rank"], ""),
                        batches=state.consumed.get(key, 0), epoch=ld["epoch"], samples_per_s=value,
                        ci95=rate.ci95 if rate is not None else None, wait_share=ld["wait_share"],
                        worker_busy_share=_busy(ld), gpu_idle_share=ld["gpu_idle_share"],
                        slowest_op=op.get("name"), slowest_op_share=op.get("share_of_fetch"))


def _slowest(lds: list[dict]) -> tuple[str | None, float | None]:
    """The op with the most time over the ranks, and its share of their fetch time."""
    total: dict[str, float] = {}
    fetch = 0.0
    for ld in lds:
        ops = ld["ops"]
        if ops and ops[0]["share_of_fetch"]:
            fetch += ops[0]["total_ms"] / ops[0]["share_of_fetch"]
        for op in ops:
            total[op["name"]] = total.get(op["name"], 0.0) + op["total_ms"]
    if not total:
        return None, None
    name = max(total, key=total.__getitem__)
    return name, (total[name] / fetch if fetch > 0 else None)


def _combined(state: LiveState, lds: list[dict], per_rank: list[LoaderValues], rates: dict) -> LoaderValues:
    mine = [rates.get((v.rank, v.loader)) for v in per_rank]
    total, ci = combine([r for r in mine if r is not None])
    if total is None:
        total = sum(v.samples_per_s or 0.0 for v in per_rank)
    elif any(r is None for r in mine):
        ci = None  # a rank without a rate: no interval for the sum
    name, share = _slowest(lds)
    first = per_rank[0]
    return LoaderValues(rank=-1, loader=first.loader, name=first.name,
                        host=",".join(sorted({v.host for v in per_rank if v.host})),
                        batches=first.batches, epoch=first.epoch, samples_per_s=total, ci95=ci,
                        wait_share=_mean(v.wait_share for v in per_rank),
                        worker_busy_share=_mean(v.worker_busy_share for v in per_rank),
                        gpu_idle_share=_mean(v.gpu_idle_share for v in per_rank), slowest_op=name,
                        slowest_op_share=share)


def run_values(state: LiveState, snap: dict, *, live: bool, final: bool = False) -> RunValues:
    """The values of one publish from a :func:`lotus.live.snapshot` of ``state``."""
    hosts: dict[int, str] = {}
    for f in state.files.values():
        if f.role == "main" and f.host:
            hosts.setdefault(f.rank, f.host)
    rates: dict = {}
    loaders = [_loader_values(state, ld, hosts, snap["now_ns"], snap["window_s"], rates) for ld in snap["loaders"]]
    by_loader: dict[int, int] = {}
    for v in loaders:
        by_loader[v.loader] = by_loader.get(v.loader, 0) + v.batches
    if not by_loader:
        return RunValues(step=0, wall_s=time.time(), live=live, final=final, main=None, loaders=loaders)
    main = max(sorted(by_loader), key=by_loader.__getitem__)
    ranks = sorted((v for v in loaders if v.loader == main), key=lambda v: v.rank)
    lds = [ld for ld in snap["loaders"] if ld["loader"] == main]
    return RunValues(step=ranks[0].batches, wall_s=time.time(), live=live, final=final,
                     main=_combined(state, lds, ranks, rates), ranks=ranks, loaders=loaders)


def scalars(values: RunValues) -> dict[str, float]:
    """The scalars of TensorBoard and W&B: ``lotus/...`` for the main loader; ``lotus/rank<r>/...`` per rank
    when there are several."""
    out: dict[str, float] = {}
    if values.main is None:
        return out
    _put(out, "lotus/", values.main, op_tags=True)
    if len(values.ranks) > 1:
        for v in values.ranks:
            _put(out, f"lotus/rank{v.rank}/", v, op_tags=False)
    return out


def _put(out: dict[str, float], prefix: str, v: LoaderValues, op_tags: bool) -> None:
    items = {"samples_per_s": v.samples_per_s, "wait_share": v.wait_share,
             "worker_busy_share": v.worker_busy_share, "gpu_idle_from_data_share": v.gpu_idle_share,
             "slowest_op_share": v.slowest_op_share}
    if v.ci95 is not None:
        items["samples_per_s_ci95_lo"], items["samples_per_s_ci95_hi"] = v.ci95
    for k, x in items.items():
        if x is not None:
            out[prefix + k] = float(x)
    if op_tags and v.slowest_op and v.slowest_op_share is not None:
        out[f"{prefix}slowest_op/{v.slowest_op}"] = float(v.slowest_op_share)
