"""The fit's op distributions (:meth:`lotus.model.params.Dist.of_ns`) of pooled runs whose op durations
may be streams (:class:`lotus.analysis.exactstats.Floats`, a scanned run: :mod:`lotus.model.scandetail`).

The in-memory fit divides each run's durations by its CPU stretch, concatenates the runs and takes
count, mean and the 50th/90th/99th percentiles. :func:`dist_of` gives the same numbers, bit for bit:
where every part is an array, by that very code; where the values are few (at most one chunk of
:data:`lotus.analysis.exactstats.CHUNK`), by reading them into one array; else :class:`Pooled` reads the
divided values a chunk at a time and :mod:`lotus.analysis.exactstats` sums them along numpy's pairwise
tree and selects the percentiles' order statistics exactly.
"""

from __future__ import annotations

import numpy as np

from lotus.analysis import exactstats
from lotus.analysis.exactstats import Floats
from lotus.model.params import Dist


class Pooled:
    """Read-only stream of the values of ``parts`` (arrays or :class:`Floats`), each divided by its scale,
    one part after the other: what :func:`lotus.analysis.exactstats.percentiles` and
    :func:`~lotus.analysis.exactstats.pairwise_sum` read."""

    def __init__(self, parts: list[tuple[np.ndarray | Floats, float]], chunk: int | None = None):
        self.parts = [(p, s) for p, s in parts if _len(p)]
        self.chunk = exactstats.CHUNK if chunk is None else chunk
        self.starts = np.cumsum([0] + [_len(p) for p, _ in self.parts])
        self.n = int(self.starts[-1])

    def read(self, off: int, m: int) -> np.ndarray:
        out = []
        end = off + m
        for (p, scale), lo, hi in zip(self.parts, self.starts[:-1].tolist(), self.starts[1:].tolist(), strict=True):
            a, b = max(off, lo), min(end, hi)
            if a < b:
                raw = p[a - lo: b - lo] if isinstance(p, np.ndarray) else p.read(a - lo, b - a)
                out.append(raw / scale)
        return np.concatenate(out) if len(out) != 1 else out[0]

    def chunks(self):
        for off in range(0, self.n, self.chunk):
            yield self.read(off, min(self.chunk, self.n - off))


def _len(p) -> int:
    return len(p) if isinstance(p, np.ndarray) else p.n


def dist_of(parts: list[tuple[np.ndarray | Floats | None, float]]) -> Dist:
    """``Dist.of_ns(np.concatenate([values / scale for values, scale in parts]))`` (None: no values)."""
    parts = [(np.zeros(0) if p is None else p, s) for p, s in parts]
    if all(isinstance(p, np.ndarray) for p, _ in parts):  # the in-memory fit, as it always was
        return Dist.of_ns(np.concatenate([p / s for p, s in parts]) if parts else np.zeros(0))
    pool = Pooled(parts)
    if pool.n <= exactstats.CHUNK:
        return Dist.of_ns(pool.read(0, pool.n) if pool.n else np.zeros(0))
    if not all(np.isfinite(s) and s != 0 for _, s in parts):  # never (a stretch is >= 1): numpy's way then
        return Dist.of_ns(pool.read(0, pool.n))
    total = exactstats.pairwise_sum(pool.read, 0, pool.n, pool.chunk)
    mean = total.dtype.type(total / pool.n)  # numpy's mean of the whole array
    p50, p90, p99 = exactstats.percentiles(pool, [50, 90, 99]) / 1e6
    return Dist(pool.n, float(mean) / 1e6, float(p50), float(p90), float(p99))


__all__ = ["Pooled", "dist_of"]
