"""Per-op statistics of a scanned run (:mod:`lotus.query.scan`): :class:`OpEngine`, kept in the events
DataFrame's ``attrs["op_engine"]``, with what the scan kept beside the events (per-epoch op totals, the
folded batch-level events' :class:`~lotus.query.batchtable.BatchTable`, their time extent and fetch
counts). Op quantiles come from the per-op log-histograms (:mod:`lotus.query.moments`); excluding
batches, or the mean's interval, takes another scan (:mod:`lotus.query.rescan`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lotus.query.moments import _Moments, hist_quantiles

OP_BUILTINS = ("load", "transform", "sample", "collate")


class OpEngine:
    """Per-op statistics of one scanned run (see the module doc); survives DataFrame attrs copies."""

    def __init__(self, paths: list[Path], offsets: dict, loader_offsets: dict, names: list[str],
                 slot_codes: list[int], moments: _Moments, first: dict[int, int]):
        self.paths, self.offsets, self.loader_offsets = paths, offsets, loader_offsets
        self.names = names  # run-wide code -> name
        self.slot_codes = slot_codes
        self.moments = moments
        self.first = first  # code -> first row index in file order (the events DataFrame's order)
        self.op_stats = True  # False: the scan kept no per-op statistics (scan_run(op_stats=False))
        self.by_epoch: dict[int, np.ndarray] = {}  # per-epoch op totals (set by scan_run)
        self.by_rank: dict[int, np.ndarray] = {}  # per-rank op totals (set by scan_run)
        # the batch-level events folded by the scan (lotus.query.batchparts); None where it kept them as rows
        self.batch_table = None  # their BatchTable
        self.folded_extent: dict[int, list[int]] = {}  # epoch -> time extent of the folded events
        self.fetch_counts = None  # fetches: ok, ok and detail, detail (what detail_share reads of them)

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __eq__(self, other):  # attrs comparisons (pandas concat) must not fail
        return self is other

    __hash__ = object.__hash__

    def _need_op_stats(self) -> None:
        if not self.op_stats:
            raise RuntimeError("this scan kept no per-op statistics (scan_run(op_stats=False)): scan again")

    def epoch_totals(self) -> dict[int, dict[str, float]]:
        """``{epoch: {op: total ns}}`` over every op event (failed/exhausted fetches included)."""
        self._need_op_stats()
        return {e: {self.names[c]: float(row[k]) for k, c in enumerate(self.slot_codes) if k < len(row) and row[k]}
                for e, row in sorted(self.by_epoch.items())}

    def rank_totals(self) -> dict[int, dict[str, float]]:
        """``{rank: {op: total ns}}`` over every op event (failed/exhausted fetches included), ops in
        pipeline order (:meth:`op_order`)."""
        self._need_op_stats()
        slot = {self.names[c]: k for k, c in enumerate(self.slot_codes)}
        order = self.op_order()
        return {r: {n: float(row[slot[n]]) for n in order if slot[n] < len(row) and row[slot[n]]}
                for r, row in sorted(self.by_rank.items())}

    def op_order(self) -> list[str]:
        """Ops present, in pipeline order: load, transform ops by first occurrence, transform, sample, collate."""
        self._need_op_stats()
        present = {self.names[c]: self.first[c] for c, k in zip(self.slot_codes, range(len(self.slot_codes)),
                                                              strict=True)
                   if k < len(self.moments.n) and self.moments.n[k] > 0}  # no op seen at all: no moments
        ops = sorted((i, n) for n, i in present.items() if n not in OP_BUILTINS)
        return ([n for n in ("load",) if n in present] + [n for _, n in ops]
                + [n for n in ("transform", "sample", "collate") if n in present])

    def op_mean_ci95_ms(self, names, exclude_keys=None) -> dict[str, list[float] | None]:
        """95% interval (ms) of each op's mean per call, batches as the sampled units (a second scan)."""
        from lotus.query.rescan import op_mean_ci95

        ci = op_mean_ci95(self, exclude_keys)
        slot = {self.names[c]: k for k, c in enumerate(self.slot_codes)}
        return {n: None if ci.get(slot.get(n)) is None else [v / 1e6 for v in ci[slot[n]]] for n in names}

    def op_table(self, exclude_keys=None) -> dict[str, dict]:
        """``{op: {count, sum_ns, mean_ns, std_ns, min_ns, max_ns, p25_ns, median_ns, p75_ns, p90_ns,
        p99_ns}}`` in pipeline order, without the events of the batch keys in ``exclude_keys`` (a frame
        with the columns rank, loader, epoch, batch_id); a second scan when there are some."""
        self._need_op_stats()
        m = self.moments
        if exclude_keys is not None and len(exclude_keys):
            from lotus.query.rescan import rescan_ops

            m = rescan_ops(self, exclude_keys)
        slot = {self.names[c]: k for k, c in enumerate(self.slot_codes)}
        out = {}
        for name in self.op_order():
            k = slot[name]
            n = int(m.n[k]) if k < len(m.n) else 0
            if n == 0:
                out[name] = {"count": 0}
                continue
            lo, hi = float(m.lo[k]), float(m.hi[k])
            p25, med, p75, p90, p99 = hist_quantiles(m.hist[k], (0.25, 0.5, 0.75, 0.9, 0.99), lo, hi)
            out[name] = {"count": n, "sum_ns": float(m.total[k]), "mean_ns": float(m.mean[k]),
                         "std_ns": math.sqrt(max(float(m.m2[k]) / n, 0.0)), "min_ns": lo, "max_ns": hi,
                         "p25_ns": p25, "median_ns": med, "p75_ns": p75, "p90_ns": p90, "p99_ns": p99}
        return out
