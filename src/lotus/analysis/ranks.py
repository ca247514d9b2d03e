"""Stragglers across ranks and nodes (``lotus analyze ranks``, the ``ranks`` section of ``lotus report``).

Per rank and per node (a node is the host name the rank's files were written on), of each rank's main
loader (the one that handed out the most of its batches; ties: the lowest id):

* ``samples_per_s`` with its 95% interval: the one throughput measure (:func:`lotus.analysis.throughput.
  loader_rates`); a node's rates add up (intervals in quadrature, :func:`lotus.analysis.runspread.combine`);
* ``wait_share``: the loop's wait over its time, as the verdict's (:func:`lotus.analysis.diagnosis.loop_spans`);
* ``slowest_op`` and its share of the rank's batch preprocessing time: the rank's op totals without the ops
  of failed and exhausted fetches (as the verdict's), per-sample ops scaled by the trace's detail share;
* ``worker_busy_share``: the mean of the rank's workers' busy shares (:func:`lotus.analysis.diagnosis.
  worker_utilisation`); a node's: the mean over its workers;
* ``gpu_data_idle_share``: GPU idle waiting for data over GPU time (CUDA events; None without them);
* from :mod:`lotus.analysis.collective`: the steps the rank was the slowest of, and how long the others
  waited for it in the collective, by cause (its input pipeline or its step).

The ``straggler``: the rank the others waited for longest (:func:`lotus.analysis.collective.summary`) when
the ranks run in lockstep; otherwise (no collective every step) the rank with the lowest samples/s, if
its interval lies below every other rank's, its cause the input pipeline when its wait share is above the
others' median, else its step. Pure functions of the batches DataFrame, the events (per-op totals; a
scanned run's engine keeps them per rank) and the trace files' headers: the same on both engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lotus.analysis import collective
from lotus.analysis.diagnosis import _NOT_OPS, loop_span_sums, worker_sums
from lotus.analysis.htmlfmt import pct
from lotus.analysis.shares import loop_spans_of, utilisation_of_parts
from lotus.analysis.stats import PER_BATCH_OPS, op_engine, op_names, prepared

RANK_COLUMNS = ["rank", "node", "loader", "batches", "samples_per_s", "ci95_lo", "ci95_hi", "rate_note", "wait_share",
                "slowest_op",
                "slowest_op_share", "worker_busy_share", "gpu_data_idle_share", "slowest_steps", "slowest_share",
                "held_s", "held_input_s", "held_step_s"]
_SUMS = ("loop_ns", "wait_ns", "workers", "busy_share_sum", "gpu_wait_ns", "gpu_step_ns", "prep_ns", "detail_prep_ns")


def rank_nodes(files: list[dict]) -> dict[int, str]:
    """Rank -> host name of its main-process file (else of any of its files; ``"?"`` when none says)."""
    out: dict[int, str] = {}
    for f in sorted(files, key=lambda f: f.get("role") != "main"):
        r = int(f.get("rank") or 0)
        if r not in out or (out[r] == "?" and f.get("hostname")):
            out[r] = str(f.get("hostname") or "?")
    return out


def rank_op_totals(events, as_recorded: bool = False) -> tuple[dict[int, dict[str, float]], float]:
    """(``{rank: {op: total ns}}`` of the parts of preprocessing (load, transform ops, collate) as recorded,
    pipeline order, without the ops of failed and exhausted fetches (as the verdict's); the detail share that
    scales per-sample ops to all batches). Integer sums (exact in float64 below 2**53 ns): the same on both
    engines; a scanned run sums them per rank while scanning, or in one more pass when some fetches failed
    or found no batch. ``as_recorded``: every op's total (those that are no part of preprocessing too) and a share
    of 1.0 (:class:`RankParts` of ranks made apart merge these)."""
    from lotus.analysis.stats import _excluded_keys, _rows_of_batches
    from lotus.query import detail_share

    engine = op_engine(events)
    drop = _excluded_keys(events, None)
    if engine is not None:
        raw = engine.rank_totals() if drop is None else _rescanned_rank_totals(engine, drop)
    else:
        names = op_names(events)
        cat = events["name"].array
        codes, labels = np.asarray(cat.codes), {n: i for i, n in enumerate(cat.categories)}
        ranks, ri = np.unique(events["rank"].to_numpy(np.int64), return_inverse=True)
        dur = events["dur_ns"].to_numpy().astype(np.float64)
        keep = ~_rows_of_batches(events, drop) if drop is not None else np.ones(len(events), bool)
        raw = {int(r): {} for r in ranks}
        for n in names:
            m = (codes == labels[n]) & keep
            sums = np.bincount(ri[m], weights=dur[m], minlength=len(ranks))  # integer sums: exact
            for k in np.flatnonzero(sums).tolist():
                raw[int(ranks[k])][n] = float(sums[k])
    if as_recorded:  # every op, and no share: parts of ranks made apart (RankParts) merge these
        return raw, 1.0
    share = detail_share(events) if any(raw.values()) else 1.0
    return {r: {n: v for n, v in ops.items() if n not in _NOT_OPS} for r, ops in raw.items()}, share


def _rescanned_rank_totals(engine, drop) -> dict[int, dict[str, float]]:
    """:meth:`lotus.query.opengine.OpEngine.rank_totals` without the ops of the batch keys ``drop`` (a pass)."""
    from lotus.query import op_chunks

    slots = len(engine.slot_codes)
    by_rank: dict[int, np.ndarray] = {}
    for arr, slot, keep, fs in op_chunks(engine, drop):
        k = np.flatnonzero(keep)
        if len(k):
            row = by_rank.setdefault(int(fs.consts["rank"]), np.zeros(slots))
            row += np.bincount(slot[k], weights=arr["dur_ns"][k].astype(np.float64), minlength=slots)
    order = engine.op_order()
    slot_of = {engine.names[c]: k for k, c in enumerate(engine.slot_codes)}
    return {r: {n: float(row[slot_of[n]]) for n in order if row[slot_of[n]]} for r, row in sorted(by_rank.items())}


def _slowest(ops: dict[str, float], share: float, sums: dict) -> tuple[str | None, float | None]:
    """The op of the largest total (per-sample ops scaled to all batches) and its share of preprocessing, as
    the verdict's (:func:`lotus.analysis.diagnosis.slowest_ops`): a per-sample op of a detail-budgeted trace
    over the detail batches' preprocessing (its time in them / theirs)."""
    if not ops:
        return None, None
    scale = {n: 1.0 if n in PER_BATCH_OPS else share for n in ops}
    name = max(ops, key=lambda n: ops[n] / scale[n])  # the first of equals, pipeline order
    base = sums["prep_ns"] if scale[name] >= 1.0 else sums["detail_prep_ns"]
    return name, ops[name] / base if base else None


def main_loaders(rates: dict) -> dict[int, int]:
    """Rank -> the loader that handed out the most of its batches (ties: the lowest id), from
    :func:`lotus.analysis.throughput.loader_rates`."""
    best: dict[int, tuple[int, int]] = {}
    for (rank, loader), (_r, nb, _ns) in sorted(rates.items()):
        if rank not in best or nb > best[rank][1]:
            best[rank] = (loader, nb)
    return {r: lo for r, (lo, _) in best.items()}


def _part_figures(pieces, loaders: dict) -> tuple[dict, dict[int, int], dict[int, dict], dict]:
    """(:func:`lotus.analysis.throughput.loader_rates`, :func:`main_loaders`, per rank the additive parts of its
    figures (so that a node's are sums of its ranks'), :func:`lotus.analysis.collective.step_rows`) of the
    ranks of ``pieces``: DataFrames of consecutive rows of those ranks, every row of each, read one after the
    other. Each piece's rows are reduced as it comes (per group sums, minima and maxima of integers: exact in
    any order); what needs all of a rank's rows at once keeps only its values: the measured rows' key and
    times (:func:`lotus.analysis.throughput.rate_rows`, of which the rates and the step rows are made), the
    GPU times in ms (summed as one array, as numpy sums it)."""
    import pandas as pd

    from lotus.analysis.gpu import gpu_ms_by_rank
    from lotus.analysis.throughput import loader_rates, rate_rows
    from lotus.query import spill

    cols: dict[str, list] = {}
    spans, workers = [], []
    gpu: dict[int, tuple[list, list]] = {}
    prep: dict[int, list[int]] = {}  # rank -> [preparation ns, of the detail batches (-1: no detail column)]
    for piece in pieces:
        rows = rate_rows(piece, ("batch_id", "wait_start_ns"))
        for c in rows.columns:
            cols.setdefault(c, []).append(rows[c])
        del rows
        spans.append(loop_span_sums(piece))
        workers.append(worker_sums(piece))
        for r, (w, st) in gpu_ms_by_rank(piece).items():  # all missing (no CUDA timings): a count
            gpu.setdefault(r, ([], []))[0].append(len(w) if np.isnan(w).all() else w)
            gpu[r][1].append(len(st) if np.isnan(st).all() else st)
        b = prepared(piece)
        del piece
        detail = "detail" in b.columns
        for r, v in b.groupby("rank", sort=True)["prep_dur_ns"].sum().items():
            prep.setdefault(int(r), [0, 0 if detail else -1])[0] += int(v)
        if detail:
            b = b[b["detail"].to_numpy(dtype=bool, na_value=False)]
            for r, v in b.groupby("rank", sort=True)["prep_dur_ns"].sum().items():
                prep[int(r)][1] += int(v)
        del b
    rate = pd.DataFrame({c: pd.concat(cols.pop(c), ignore_index=True) for c in list(cols)}, copy=False)
    rates = loader_rates(rate, loaders)
    main = main_loaders(rates)
    steps = spill.copies_of(collective.step_rows(rate, main))  # on disk until the step table reads them
    del rate
    spill.trim()
    out: dict[int, dict] = {}

    def add(rank, key, value):
        out.setdefault(int(rank), dict.fromkeys(_SUMS, 0.0))[key] += float(value)

    spans = loop_spans_of(spans)
    spans = spans[(spans["loader"] == spans["rank"].map(main)).to_numpy(dtype=bool, na_value=False)]
    for rank, g in spans.groupby("rank", sort=True):
        add(rank, "loop_ns", g["span_ns"].sum())
        add(rank, "wait_ns", g["wait_ns"].sum())
    util = utilisation_of_parts(workers)
    for rank, g in util.groupby("rank", sort=True):
        s = g["busy_share"].dropna()
        add(rank, "workers", len(s))
        add(rank, "busy_share_sum", s.sum())
    for rank in sorted(gpu):
        for key, arrays in zip(("gpu_wait_ns", "gpu_step_ns"), gpu.pop(rank), strict=True):
            add(rank, key, _nansum(arrays) * 1e6)
    for rank, (total, detail_total) in sorted(prep.items()):
        add(rank, "prep_ns", total)
        if detail_total >= 0:
            add(rank, "detail_prep_ns", detail_total)
    return rates, main, out, steps


def _nansum(arrays: list) -> float:
    """``np.nansum`` of the arrays concatenated (an int: that many NaN), as numpy sums the one array (pairwise:
    the same blocks); 0.0 where every value is NaN."""
    if all(isinstance(a, int) for a in arrays):
        return 0.0
    if len(arrays) == 1:
        return float(np.nansum(arrays[0]))
    return float(np.nansum(np.concatenate([np.full(a, np.nan) if isinstance(a, int) else a for a in arrays])))


def _figures(sums: dict, ops: dict[str, float], share: float) -> dict:
    """The figures of a rank or node from its sums and op totals."""
    covered = sums["gpu_wait_ns"] + sums["gpu_step_ns"]
    slow, slow_share = _slowest(ops, share, sums)
    return {"wait_share": sums["wait_ns"] / sums["loop_ns"] if sums["loop_ns"] else None, "slowest_op": slow,
            "slowest_op_share": slow_share,
            "worker_busy_share": sums["busy_share_sum"] / sums["workers"] if sums["workers"] else None,
            "gpu_data_idle_share": sums["gpu_wait_ns"] / covered if covered > 0 else None}


# the batches columns rank_report reads: a scanned run's report makes only these (Config.batches_of)
RANK_BATCH_COLUMNS = ["rank", "loader", "epoch", "batch_id", "worker_id", "dispatch_ns", "prep_start_ns",
                      "prep_dur_ns", "prep_end_ns", "n_samples", "failed", "wait_start_ns", "wait_dur_ns",
                      "consumed_ns", "gpu_wait_ns", "gpu_step_ns", "detail"]


@dataclass
class RankParts:
    """What a report on some ranks needs of their batches and events (:func:`rank_parts_of`), in a form that
    merges (:meth:`merge`): the parts of different ranks made apart (in other processes, on a cluster's
    workers: :mod:`lotus.analysis.rankmap`) add up to those of all of them at once."""

    rates: dict = field(default_factory=dict)  # (rank, loader) -> loader_rates' value
    main: dict = field(default_factory=dict)  # rank -> main loader
    sums: dict = field(default_factory=dict)  # rank -> the additive parts of its figures (_SUMS)
    steps: list = field(default_factory=list)  # collective.step_rows of parts of whole ranks, in rank order
    ops: dict = field(default_factory=dict)  # rank -> {op: total ns} (rank_op_totals, before the detail share)
    fetches: tuple = (0, 0, 0)  # fetches: ok, ok and detail, detail (lotus.query.detail_counts)

    def merge(self, other: RankParts) -> None:
        """Add ``other``'s ranks (none of which is here) to these."""
        self.rates.update(other.rates)
        self.main.update(other.main)
        self.sums.update(other.sums)
        self.steps.extend(other.steps)
        self.ops.update(other.ops)
        self.fetches = tuple(a + b for a, b in zip(self.fetches, other.fetches, strict=True))


def rank_parts_of(events, batches, loaders: dict) -> RankParts:
    """The :class:`RankParts` of a run's (or some ranks') events and batches (``batches``: as
    :func:`rank_report`'s)."""
    import pandas as pd

    from lotus.query import detail_counts

    out = RankParts()
    for part in [batches] if isinstance(batches, pd.DataFrame) else batches:
        got, mine, part_sums, steps = _part_figures([part] if isinstance(part, pd.DataFrame) else part, loaders)
        out.merge(RankParts(got, mine, part_sums, [steps]))
        del part
    out.ops = rank_op_totals(events, as_recorded=True)[0]
    out.fetches = tuple(detail_counts(events))
    return out


def rank_report(events, batches, loaders: dict, files: list[dict]) -> dict:
    """``{"loader", "world_size", "missing_ranks", "ranks": [row...], "nodes": [row...], "collective":
    {...}, "straggler": {...} | None}`` (rows: :data:`RANK_COLUMNS` and ``loader``; ``loader``: the ranks'
    main loader, or None where they differ; see the module doc).

    ``batches``: the batches DataFrame, or an iterable of parts that split its rows by rank (each rank's rows
    in one of them, in their order: :meth:`lotus.analysis.runs.Config.batches_by_rank`), read one after the
    other; a part is a DataFrame or an iterable of DataFrames, pieces of its rows in order, reduced one at a
    time (:func:`_part_figures`): every figure but the step table is a rank's own, and the step table reads
    only a few columns of each (:func:`lotus.analysis.collective.step_rows`); the same report."""
    return report_of_parts(rank_parts_of(events, batches, loaders), files)


def report_of_parts(parts: RankParts, files: list[dict]) -> dict:
    """:func:`rank_report` from the :class:`RankParts` of every rank (whose step rows it empties) and the
    headers of the run's files."""
    from lotus.analysis.runspread import combine
    from lotus.query import detail_counts_share

    rates, main, sums = parts.rates, parts.main, parts.sums
    nodes = rank_nodes(files)
    ops = {r: {n: v for n, v in o.items() if n not in _NOT_OPS} for r, o in parts.ops.items()}
    detail = detail_counts_share(parts.fetches) if any(parts.ops.values()) else 1.0
    steps, lockstep = collective.step_table_of(parts.steps, main)
    loops = [s["loop_ns"] for s in sums.values() if s["loop_ns"] > 0]
    coll = collective.summary(steps, lockstep, float(np.median(loops)) if loops else None, nodes)
    ranks = sorted({r for r, _ in rates} | set(sums) | set(nodes))
    rows = []
    for r in ranks:
        rate, nb, _ = rates.get((r, main.get(r)), (None, 0, 0.0))
        s = sums.get(r, dict.fromkeys(_SUMS, 0.0))
        blame = coll["per_rank"].get(r, {})
        rows.append({"rank": r, "node": nodes.get(r, "?"), "loader": main.get(r), "batches": nb,
                     "samples_per_s": rate.samples_per_s if rate else None,
                     "ci95_lo": rate.ci95[0] if rate and rate.ci95 else None,
                     "ci95_hi": rate.ci95[1] if rate and rate.ci95 else None,
                     "rate_note": rate.note if rate else "no batch handed to the loop",
                     **_figures(s, ops.get(r, {}), detail),
                     "slowest_steps": blame.get("slowest_steps", 0), "slowest_share": blame.get("slowest_share", 0.0),
                     **{k: blame.get(k, 0.0) for k in ("held_s", "held_input_s", "held_step_s")}})
    node_rows = []
    for node in sorted(set(nodes.get(r, "?") for r in ranks)):
        mine = [r for r in ranks if nodes.get(r, "?") == node]
        s = {k: sum(sums.get(r, {}).get(k, 0.0) for r in mine) for k in _SUMS}
        op_sum: dict[str, float] = {}
        for r in mine:
            for n, v in ops.get(r, {}).items():
                op_sum[n] = op_sum.get(n, 0.0) + v
        mine_rates = [rates[(r, main[r])][0] for r in mine if r in main]
        total, ci = combine(mine_rates)
        notes = sorted({x.note for x in mine_rates if x.note})
        blame = coll["per_node"].get(node, {})
        node_rows.append({"node": node, "ranks": mine, "samples_per_s": total, "ci95": list(ci) if ci else None,
                          "rate_note": "; ".join(notes) or (None if ci or total is None else "no interval"),
                          **_figures(s, op_sum, detail), "slowest_steps": blame.get("slowest_steps", 0),
                          "slowest_share": blame.get("slowest_share", 0.0),
                          **{k: blame.get(k, 0.0) for k in ("held_s", "held_input_s", "held_step_s")}})
    world = max((int(f.get("world_size") or 1) for f in files), default=1)
    straggler = coll["straggler"] if lockstep else _rate_straggler(rows)
    same = set(main.values())
    return {"loader": same.pop() if len(same) == 1 else None, "world_size": world,
            "missing_ranks": sorted(set(range(world)) - set(ranks)),
            "ranks": rows, "nodes": node_rows, "collective": coll, "straggler": straggler}


def _rate_straggler(rows: list[dict]) -> dict | None:
    """Ranks not in lockstep: the slowest by samples/s, if its interval lies below every other rank's."""
    known = [r for r in rows if r["samples_per_s"] is not None]
    if len(known) < 2:
        return None
    slow = min(known, key=lambda r: (r["samples_per_s"], r["rank"]))
    others = [r for r in known if r is not slow]
    top = slow["ci95_hi"] if slow["ci95_hi"] is not None else slow["samples_per_s"]
    if any(top >= (r["ci95_lo"] if r["ci95_lo"] is not None else r["samples_per_s"]) for r in others):
        return None
    waits = [r["wait_share"] for r in others if r["wait_share"] is not None]
    worse = slow["wait_share"] is not None and waits and slow["wait_share"] > float(np.median(waits))
    return {"rank": slow["rank"], "node": slow["node"], "basis": "rate",
            "cause": collective.INPUT if worse else collective.STEP, "samples_per_s": slow["samples_per_s"],
            "others_median_samples_per_s": float(np.median([r["samples_per_s"] for r in others]))}


def straggler_text(s: dict | None, coll: dict) -> str:
    """One sentence on the straggler of a :func:`rank_report` (or on why none is named)."""
    if s is None:
        if coll.get("steps") and coll.get("lockstep"):
            return (f"no rank holds the others back: the collective paid {pct(coll.get('cost_share'))} of the loop "
                    f"(hand-offs spread {coll['spread_ms']['median']:.3g} ms in median)")
        return "no rank stands out" + ("" if coll.get("lockstep") or not coll.get("steps") else
                                       " (ranks not in lockstep; their samples/s intervals overlap)")
    where = f"rank {s['rank']}" + (f" (node {s['node']})" if s.get("node") not in (None, "?") else "")
    if s["basis"] == "steps":
        return (f"{where} holds the others back: they waited {s['held_s']:.3g} s for it in the collective "
                f"({pct(s['held_share_of_loop'])} of the loop), it was the slowest at {pct(s['slowest_share'])} of "
                f"the steps; cause: its {s['cause']}")
    return (f"{where} is the slowest ({s['samples_per_s']:.4g} samples/s, the others "
            f"{s['others_median_samples_per_s']:.4g} in median; ranks not in lockstep); cause: its {s['cause']}")


__all__ = ["RANK_BATCH_COLUMNS", "RANK_COLUMNS", "rank_nodes", "rank_op_totals", "rank_report", "straggler_text"]
