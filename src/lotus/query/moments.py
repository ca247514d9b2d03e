"""Streaming per-op aggregates for the out-of-core engine (:mod:`lotus.query.scan`).

:class:`_Moments` merges chunks of (op slot, duration) pairs: count, sum, mean and M2 (Chan's parallel
merge of per-chunk moments), exact min and max, and a log-histogram of :data:`BINS_PER_OCTAVE` bins per
power of two (relative width 2**(1/1024) - 1 = 0.068%), from which :func:`hist_quantiles` reads numpy's
linearly interpolated quantiles within about half a bin (0.034%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

BINS_PER_OCTAVE = 1024
N_BINS = 64 * BINS_PER_OCTAVE + 2  # bin 0: durations <= 0; bin 1 + floor(log2(d) * K) otherwise


@dataclass
class _Moments:
    """Running per-op aggregates over chunks (slot-indexed arrays)."""

    n: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hist: np.ndarray = field(default_factory=lambda: np.zeros((0, N_BINS), np.int64))
    lo_bin: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # lowest bin counted so far
    hi_bin: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # highest bin counted so far

    def grow(self, slots: int) -> None:
        k = slots - len(self.n)
        if k <= 0:
            return
        self.n = np.concatenate([self.n, np.zeros(k, np.int64)])
        self.total = np.concatenate([self.total, np.zeros(k)])
        self.mean = np.concatenate([self.mean, np.zeros(k)])
        self.m2 = np.concatenate([self.m2, np.zeros(k)])
        self.lo = np.concatenate([self.lo, np.full(k, np.iinfo(np.int64).max)])
        self.hi = np.concatenate([self.hi, np.full(k, np.iinfo(np.int64).min)])
        self.hist = np.concatenate([self.hist, np.zeros((k, N_BINS), np.int64)])
        self.lo_bin = np.concatenate([self.lo_bin, np.full(k, N_BINS, np.int64)])
        self.hi_bin = np.concatenate([self.hi_bin, np.full(k, -1, np.int64)])

    def add(self, slot: np.ndarray, dur: np.ndarray, slots: int) -> np.ndarray | None:
        """Merge one chunk: ``slot`` (op slot of each event) and ``dur`` (int64 ns); returns its per-slot sums."""
        if not len(slot):
            return None
        stats = self.chunk(slot, dur, slots)
        self.merge(*stats)
        return stats[1]

    def chunk(self, slot: np.ndarray, dur: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Add one chunk's durations to the histograms, minima and maxima (exact, in any order); returns its
        per-slot count, sum and sum of squares, for :meth:`merge` (the means and M2, whose floating-point
        results depend on the order of the chunks)."""
        self.grow(slots)
        d = dur.astype(np.float64)
        b = _bins(dur)
        flat = slot.astype(np.int64) * N_BINS + b
        n = np.bincount(slot, minlength=slots)
        s = np.bincount(slot, weights=d, minlength=slots)
        sq = np.bincount(slot, weights=d * d, minlength=slots)
        if len(flat) * 4 < slots * N_BINS:  # a small chunk: its bins, not every bin
            at, count = np.unique(flat, return_counts=True)
        else:
            dense = np.bincount(flat, minlength=slots * N_BINS)
            at = np.flatnonzero(dense)
            count = dense[at]
        if not self.hist.flags.c_contiguous:
            self.hist = np.ascontiguousarray(self.hist)
        self.hist.reshape(-1)[at] += count  # a view (contiguous), the bins distinct
        # exact min/max: only values in the run's extreme bins can be extremes, and only chunks with values
        # there need a look (the chunk's lowest/highest bin of a slot: the first/last of its sorted bins)
        first = np.searchsorted(at, np.arange(slots + 1) * N_BINS)
        for k in np.flatnonzero(n > 0).tolist():
            lo_b, hi_b = int(at[first[k]]) - k * N_BINS, int(at[first[k + 1] - 1]) - k * N_BINS
            if lo_b <= self.lo_bin[k]:
                self.lo_bin[k] = lo_b
                self.lo[k] = min(self.lo[k], int(dur[flat == k * N_BINS + lo_b].min()))
            if hi_b >= self.hi_bin[k]:
                self.hi_bin[k] = hi_b
                self.hi[k] = max(self.hi[k], int(dur[flat == k * N_BINS + hi_b].max()))
        return n, s, sq

    def merge(self, n: np.ndarray, s: np.ndarray, sq: np.ndarray) -> None:
        """Chan's merge of one chunk's per-slot count, sum and sum of squares into the running count, sum,
        mean and M2 (slots past the chunk's: none of its events)."""
        if len(n) < len(self.n):
            n, s, sq = (np.pad(a, (0, len(self.n) - len(a))) for a in (n, s, sq))
        elif len(n) > len(self.n):
            self.grow(len(n))
        has = n > 0
        cm = np.where(has, s / np.maximum(n, 1), 0.0)
        cm2 = np.maximum(sq - s * cm, 0.0)
        tot = self.n + n
        delta = cm - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            self.mean = np.where(has, self.mean + delta * n / np.maximum(tot, 1), self.mean)
            self.m2 = np.where(has, self.m2 + cm2 + delta * delta * self.n * n / np.maximum(tot, 1), self.m2)
        self.n = tot
        self.total = self.total + s


def _epoch_sums(acc: dict, epoch: np.ndarray, slot: np.ndarray, dur: np.ndarray, slots: int,
                sums: np.ndarray | None = None) -> None:
    """Per epoch, per op slot: total ns (for the per-epoch slowest op of ``lotus report``'s trends);
    ``sums``: the chunk's per-slot totals, used as they are when the chunk holds one epoch."""
    lo, hi = int(epoch.min()), int(epoch.max())
    if sums is not None and lo == hi:
        row = acc.get(lo, np.zeros(0))
        acc[lo] = np.pad(row, (0, slots - len(row))) + sums
        return
    n = int(epoch.max()) - lo + 1
    sums = np.bincount((epoch - lo).astype(np.int64) * slots + slot, weights=dur.astype(np.float64),
                       minlength=n * slots).reshape(n, slots)
    for i in np.flatnonzero(sums.any(axis=1)).tolist():
        row = acc.get(lo + i, np.zeros(0))
        acc[lo + i] = np.pad(row, (0, slots - len(row))) + sums[i]


def _rank_sums(acc: dict, rank: int, sums: np.ndarray) -> None:
    """Per rank, per op slot: total ns (``lotus analyze ranks``' slowest op of each rank); ``sums``: a
    chunk's per-slot totals (integer sums, exact in float64 below 2**53 ns)."""
    row = acc.get(rank, np.zeros(0))
    acc[rank] = np.pad(row, (0, len(sums) - len(row))) + sums


def _bins(dur: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.floor(np.log2(np.maximum(dur, 1).astype(np.float64)) * BINS_PER_OCTAVE).astype(np.int64) + 1
    b[dur <= 0] = 0
    return np.minimum(b, N_BINS - 1)


def _bin_value(b: np.ndarray) -> np.ndarray:
    """Geometric centre of bins (0 for bin 0)."""
    b = np.asarray(b, np.float64)
    return np.where(b <= 0, 0.0, np.exp2((b - 0.5) / BINS_PER_OCTAVE))


def hist_quantiles(hist: np.ndarray, qs, lo: float, hi: float) -> list[float]:
    """Quantiles (numpy's linear interpolation) of the values counted in ``hist``."""
    n = int(hist.sum())
    cum = np.cumsum(hist)
    out = []
    for q in qs:
        r = q * (n - 1)
        i0 = math.floor(r)
        i1 = min(i0 + 1, n - 1)
        b0, b1 = np.searchsorted(cum, [i0 + 1, i1 + 1])
        v0, v1 = (float(np.clip(_bin_value(b), lo, hi)) for b in (b0, b1))
        if i0 == 0:
            v0 = lo
        if i1 == n - 1:
            v1 = hi
        out.append(v0 + (v1 - v0) * (r - i0))
    return out
