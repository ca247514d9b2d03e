"""Every record of a scanned run counted by event name, with its time span, ranks and epochs: what
``lotus info`` reports, without the events DataFrame the in-memory path builds for it.

The scan (:func:`lotus.query.scan.scan_run` with ``census=True``) feeds each chunk of records as read,
after the same expansion and derivation as :func:`lotus.trace.load_events` (packed batches, derived
``load``/``transform`` spans), so the counts are those of the events DataFrame row for row. Memory: one
count per event name and one flag per epoch.
"""

from __future__ import annotations

import numpy as np

from lotus.trace import schema as S


class Census:
    """Counts by run-wide name code, time span (ns), ranks and epochs of the records seen."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, np.int64)
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self.ranks: set[int] = set()
        self.epochs: set[int] = set()

    def add(self, arr: np.ndarray, per_code: np.ndarray, rank: int, shift_ns: int) -> None:
        """One chunk: its records ``arr``, their counts by code (``np.bincount`` of the codes), the rank of
        its file and the shift of its clock onto the run's (wall-clock) time line."""
        if not len(arr):
            return
        if len(per_code) > len(self.counts):
            self.counts = np.concatenate([self.counts, np.zeros(len(per_code) - len(self.counts), np.int64)])
        self.counts[: len(per_code)] += per_code
        start = arr["start_ns"]
        lo, hi = int(start.min()) + shift_ns, int((start + arr["dur_ns"]).max()) + shift_ns
        self.start_ns = lo if self.start_ns is None else min(self.start_ns, lo)
        self.end_ns = hi if self.end_ns is None else max(self.end_ns, hi)
        self.ranks.add(int(rank))
        ep = arr["epoch"].astype(np.int64)
        low = int(ep.min())
        self.epochs.update((np.flatnonzero(np.bincount(ep - low)) + low).tolist())

    def legacy_fetches(self, n: int) -> None:
        """``n`` fetches flagged FETCH_STOP (lotus <= 0.1) were read as ``exhausted`` events."""
        if n:
            self.counts[S.EV_FETCH] -= n
            self.counts[S.EV_EXHAUSTED] += n

    def events(self) -> int:
        return int(self.counts.sum())

    def by_label(self, labels: list[str]) -> dict[str, int]:
        """Counts by event label (the events DataFrame's name categories, in their order), nonzero only."""
        return {labels[c]: int(n) for c, n in enumerate(self.counts.tolist()) if n > 0}
