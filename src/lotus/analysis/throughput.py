"""Throughput of the training loop from a trace: samples/s handed to the loop, per loader and in all.

One measure (:func:`lotus.analysis.steady.steady_rate`), per (rank, loader); ranks run side by side, so
their rates add up (their intervals in quadrature): from the hand-off of the *ramp*'s last batch to the
last hand-off of the run, epoch starts inside counted (a long run pays them). The ramp is the
``num_workers x prefetch_factor`` batches (1 without workers) that can all be ready before the loop's
first request: they go at the step's pace, so counting them favours many workers on short probes. A few
leading start-up batches after it (a first CUDA step) are left out too. Every rate comes with its 95%
interval (``ci95``: this run's hand-offs, see :mod:`lotus.analysis.steady`, plus the run-to-run spread that
separate runs of a job show, :func:`lotus.analysis.runspread.default_run_spread`; ``within_ci95`` without it).

Failed batches and exhausted fetches are not batches (``ok_batches``). The headline is the loader that
handed out the most batches (the training loader when a script also validates).

``summarize_run(path)`` is what a launcher probe reports: this, plus the verdict's wait share; for a
replay probe (``LOTUS_REPLAY``) only the replayed batches count (the loop's ingestion rate), each epoch
a stretch of its own (an epoch start prepares batches anew: not ingestion).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import numpy as np

from lotus.analysis.runspread import RUN_SPREAD_DOF, combine, default_run_spread, with_run_spread
from lotus.analysis.steady import SteadyRate, steady_rate

_log = logging.getLogger("lotus.analysis")

COLUMNS = ["rank", "loader", "batches", "samples", "steady_batches", "steady_samples", "steady_s",
           "samples_per_s", "ci95_lo", "ci95_hi", "ramp_batches", "startup_batches", "blocks", "note"]


def _batch_size(loaders: dict, rank: int, loader: int):
    desc = (loaders or {}).get((rank, loader)) or {}
    bs = desc.get("batch_size")
    return int(bs) if isinstance(bs, int) and bs > 0 else None


def ramp_batches(desc: dict | None) -> int:
    """Batches that can be ready before the loop's first request: ``num_workers x prefetch_factor`` (>= 1)."""
    desc = desc or {}
    w = desc.get("num_workers") if isinstance(desc.get("num_workers"), int) else 0
    pf = desc.get("prefetch_factor") if isinstance(desc.get("prefetch_factor"), int) else 2
    return max(w * pf, 1)


def ramp_reason(desc: dict | None) -> str:
    """Why the ramp is that long, in words: '4 workers x prefetch 2', 'no workers: the first batch'."""
    w, pf = (desc or {}).get("num_workers"), (desc or {}).get("prefetch_factor")
    if isinstance(w, int) and w > 0:
        return f"{w} workers x prefetch {pf or 2}"
    return "no workers: the first batch" if w == 0 else "loader settings unknown: the first batch"


def _workers(desc: dict | None) -> int:
    w = (desc or {}).get("num_workers")
    return w if isinstance(w, int) and w > 0 else 0


RATE_COLUMNS = ("rank", "loader", "epoch", "consumed_ns", "n_samples", "prep_dur_ns", "wait_dur_ns", "failed")


def _floats(column) -> np.ndarray:
    """A column as a new float64 array, NaN where missing (its ``astype("Float64")``'s values, without that
    copy)."""
    out = column.to_numpy(np.float64, na_value=np.nan)
    return out if out.flags.owndata and out.flags.writeable else out.copy()  # never a view of the column


def _groups(b):
    """``b.groupby(["rank", "loader"], sort=True)``'s groups; one group: ``b`` itself (no copy of it)."""
    if len(b) and not (b["rank"].isna().any() or b["loader"].isna().any()):
        r, lo = b["rank"].to_numpy(), b["loader"].to_numpy()
        if (r == r[0]).all() and (lo == lo[0]).all():
            return [((r[0], lo[0]), b)]
    return b.groupby(["rank", "loader"], sort=True)


def _measured(b, replayed_only: bool) -> np.ndarray:
    """The rows :func:`loader_rates` measures: ok batches that were consumed (``replayed_only``: and never
    prepared)."""
    from lotus.query import failed_mask

    keep = ~failed_mask(b) & b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)  # ok, consumed
    if replayed_only:
        keep &= b["prep_dur_ns"].isna().to_numpy(dtype=bool, na_value=True)
    return keep


def rate_rows(batches, extra: tuple[str, ...] = ()):
    """Of ``batches`` (or a piece of a run's rows), the rows :func:`loader_rates` measures (not
    ``replayed_only``), only the columns it then reads (and ``extra``): :func:`loader_rates` of them, or of
    their concatenation over the pieces of a run's rows, is that of the run."""
    cols = [c for c in RATE_COLUMNS if c not in ("failed", "prep_dur_ns") and c in batches.columns]
    return batches[[*cols, *extra]][_measured(batches, False)]


def rate_frame(table, *, replayed_only: bool = False):
    """Of a scanned run's compact table, the DataFrame :func:`loader_rates` reads: its :data:`RATE_COLUMNS`,
    of the rows it measures only (made of those rows: neither the whole batches DataFrame nor a copy of
    every row)."""
    probe = table.frame(["failed", "consumed_ns", "prep_dur_ns"])
    keep = _measured(probe, replayed_only)
    del probe
    return table.frame(list(RATE_COLUMNS), rows=keep)


def loader_rates(batches, loaders: dict | None = None, *, replayed_only: bool = False) -> dict:
    """{(rank, loader): (SteadyRate, batches, samples)} of every loader that handed out a batch."""
    b = batches[[c for c in RATE_COLUMNS if c in batches.columns]]  # a group's columns: cheap slices
    keep = _measured(b, replayed_only)
    if not keep.all():  # one copy, and none where every row is kept
        b = b[keep]
    out = {}
    spread = default_run_spread()
    for (rank, loader), g in _groups(b):
        desc = (loaders or {}).get((int(rank), int(loader))) or {}
        nn = _floats(g["n_samples"])
        fallback = _batch_size(loaders, int(rank), int(loader))
        if fallback is not None:
            nn[np.isnan(nn)] = fallback
        t = g["consumed_ns"].to_numpy(np.int64)
        order = None if len(t) < 2 or bool((t[1:] >= t[:-1]).all()) else np.argsort(t, kind="stable")
        ep = g["epoch"].to_numpy()
        if order is not None:  # in hand-off order already (a stable sort would keep them): no permutation
            t, nn, ep = t[order], nn[order], ep[order]
        r = steady_rate(t, nn, ramp=1 if replayed_only else ramp_batches(desc), workers=_workers(desc),
                        segments=ep if replayed_only else None, epochs=ep)
        r = with_run_spread(r, spread, RUN_SPREAD_DOF)
        first = len(t) - r.batches  # one stretch: the window's batches are the last r.batches
        if not replayed_only and r.window_s > 0 and 0 < first < len(t) and "wait_dur_ns" in g.columns:
            wait = _floats(g["wait_dur_ns"])
            wait = wait if order is None else wait[order]
            if np.isfinite(wait[first:]).any():
                r.extra["wait_share"] = float(np.nansum(wait[first:])) / 1e9 / r.window_s
        out[(int(rank), int(loader))] = (r, len(g), float(np.nansum(nn)))
    return out


def main_loader(rates: dict) -> int | None:
    """The loader that handed out the most batches over all ranks (:func:`loader_rates`' keys), the lowest
    id among equals: the training loader when a script also validates."""
    by_loader: dict[int, int] = {}
    for (_rank, loader), (_r, nb, _ns) in rates.items():
        by_loader[loader] = by_loader.get(loader, 0) + nb
    return max(sorted(by_loader), key=lambda lid: by_loader[lid]) if by_loader else None


def loader_throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False):
    """One row per (rank, loader): batches, samples, the steady window's batches/samples/seconds,
    samples_per_s with its 95% interval (``ci95_lo``, ``ci95_hi``), what was left out. ``replayed_only``:
    only batches lotus replayed (``LOTUS_REPLAY``: consumed, never prepared), the loop's ingestion rate."""
    return _per_loader(loader_rates(batches, loaders, replayed_only=replayed_only))


def _per_loader(rates: dict):
    """:func:`loader_throughput`'s rows from :func:`loader_rates`' result."""
    import pandas as pd

    rows = []
    for (rank, loader), (r, nb, ns) in rates.items():
        rows.append({"rank": rank, "loader": loader, "batches": nb, "samples": ns, "steady_batches": r.batches,
                     "steady_samples": r.samples, "steady_s": r.window_s, "samples_per_s": r.samples_per_s,
                     "ci95_lo": r.ci95[0] if r.ci95 else None, "ci95_hi": r.ci95[1] if r.ci95 else None,
                     "ramp_batches": r.ramp_batches, "startup_batches": r.startup_batches, "blocks": r.blocks,
                     "note": r.note})
    return pd.DataFrame(rows, columns=COLUMNS)


def throughput(batches, loaders: dict | None = None, *, replayed_only: bool = False) -> dict:
    """Samples/s of the main loader (summed over ranks) with its ``ci95``, and the per-loader table;
    ``batches``: the batches DataFrame or a scanned run's compact table (:mod:`lotus.analysis.compact`:
    a DataFrame of only :data:`RATE_COLUMNS` made from it, not the whole batches DataFrame)."""
    from lotus.analysis import compact

    if compact.is_table(batches):  # a scanned run's table: the columns and rows read, made once
        batches = rate_frame(batches, replayed_only=replayed_only)
    rates = loader_rates(batches, loaders, replayed_only=replayed_only)
    del batches
    per = _per_loader(rates) if rates else None
    if not rates:
        return {"samples_per_s": None, "ci95": None, "batches": 0, "samples": 0, "loader": None, "loaders": [],
                "note": "no batch was handed to the loop"}
    main = main_loader(rates)
    mine: list[tuple[SteadyRate, int, float]] = [v for (_rk, lid), v in rates.items() if lid == main]
    total, ci = combine([r for r, _, _ in mine])
    # the run's own interval (without the run-to-run spread): the one a probe's stop rule judges
    own_total, own = combine([replace(r, ci95=r.within_ci95) if r.within_ci95 else r for r, _, _ in mine])
    notes = sorted({r.note for r, _, _ in mine if r.note})
    return {"samples_per_s": total, "ci95": list(ci) if ci else None,
            "rel_halfwidth": (ci[1] - total) / total if ci and total else None,
            "within_rel_halfwidth": (own[1] - own_total) / own_total if own and own_total else None,
            "batches": sum(nb for _, nb, _ in mine), "samples": sum(ns for _, _, ns in mine),
            "steady_batches": sum(r.batches for r, _, _ in mine),
            "window_s": max((r.window_s for r, _, _ in mine), default=0.0),
            "left_out": {"ramp_batches": sum(r.ramp_batches for r, _, _ in mine),
                         "ramp": ramp_reason(next((d for (_r, lid), d in sorted((loaders or {}).items())
                                                   if lid == main), None)),
                         "startup_batches": sum(r.startup_batches for r, _, _ in mine)},
            "window_wait_share": _mean([r.extra.get("wait_share") for r, _, _ in mine]),
            "run_spread": mine[0][0].run_rel_sd,
            "note": "; ".join(notes) or None, "loader": main, "ranks": len(mine),
            "loaders": per.to_dict(orient="records")}


def _mean(vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize_run(path: str | os.PathLike) -> dict:
    """Throughput and wait share of the run at ``path``; ``traced`` False when it holds no trace."""
    from lotus.analysis.diagnosis import verdict
    from lotus.analysis.runs import load_config
    from lotus.errors import InputError

    try:
        cfg = load_config(path)
    except InputError as exc:
        return {"traced": False, "reason": str(exc)}
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    replayed = any(isinstance(d, dict) and d.get("replay_batches") for d in cfg.loaders.values())
    # a replay probe: the replayed batches inside epochs (an epoch start prepares batches anew: not ingestion)
    t = throughput(cfg.batches, cfg.loaders, replayed_only=replayed)
    return {"traced": True, **t, "wait_share": v["wait_share"], "steady_wait_share": v["steady_wait_share"],
            "class": v["class"], "verdict": v, "name": cfg.name}
