"""numpy's statistics of a long stream of float64 values, exactly, in memory that does not grow with it.

:class:`Floats` collects values in order: in memory up to ``limit`` values, then in a temporary file
(:func:`lotus.query.spill.spill_dir`, unlinked: nothing stays behind). :func:`describe` gives what
:func:`lotus.analysis.describe.describe_ms` gives for the whole array, bit for bit:

* sums (``sum``, ``mean``, ``std``): ``np.add.reduce`` of a contiguous float64 array is a pairwise sum
  (``pairwise_sum`` of numpy's loops: halves rounded down to a multiple of 8, numpy's own unrolled loop
  below 128 values). :func:`pairwise_sum` walks the same tree and hands every subtree of at most
  ``chunk`` values to numpy, so the additions are the same ones in the same order (tested against
  ``np.add.reduce`` for many lengths and chunk sizes). ``std`` is numpy's two passes: the mean, then
  the pairwise sum of the squared deviations, divided by the count, its square root;
* percentiles (``np.percentile``, method ``linear``): the order statistics they interpolate are found
  exactly by radix selection on the values' bits (a histogram of 16 bits a pass, then the few values
  of the chosen bin sorted), then interpolated as numpy's ``_lerp`` does;
* ``min`` and ``max`` are exact anyway.

Memory: one chunk of values and a histogram of 65,536 counts; time: a handful of sequential reads of
the stream (8 bytes a value) from the page cache.
"""

from __future__ import annotations

import errno
import tempfile

import numpy as np

from lotus.analysis.describe import describe_clean, stat_dict
from lotus.query import SpillError, spill_dir

CHUNK = 1 << 19  # values read at once, and values held in memory before a stream spills
_BINS = 1 << 16
_PCTS = [25, 50, 75, 90, 99]


class Floats:
    """A stream of float64 values (module doc); :meth:`add` appends, :meth:`chunks` reads them back."""

    def __init__(self, limit: int | None = None, chunk: int | None = None):
        self.limit = CHUNK if limit is None else limit
        self.chunk = CHUNK if chunk is None else chunk
        self.n = 0
        self._mem: list[np.ndarray] = []
        self._file = None
        self.lo = self.hi = None  # min and max (numpy scalars)

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def add(self, v: np.ndarray) -> None:
        v = np.ascontiguousarray(v, np.float64)
        if not len(v):
            return
        lo, hi = v.min(), v.max()
        self.lo = lo if self.lo is None or lo < self.lo else self.lo
        self.hi = hi if self.hi is None or hi > self.hi else self.hi
        self.n += len(v)
        if self._file is None and self.n <= self.limit:
            self._mem.append(v.copy())
            return
        if self._file is None:
            try:
                self._file = tempfile.TemporaryFile(prefix="lotus-spill-", dir=spill_dir())  # noqa: SIM115 (close())
            except OSError as exc:
                raise SpillError(f"cannot create a temporary file in {spill_dir()} ({exc.strerror}); "
                                 "set $LOTUS_SPILL_DIR to a writable directory") from None
            held, self._mem = self._mem, []
            for a in held:
                self._write(a)
        self._write(v)

    def _write(self, v: np.ndarray) -> None:
        try:
            self._file.write(memoryview(v).cast("B"))
        except OSError as exc:
            self.close()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise SpillError(f"no space left in {spill_dir()} for temporary values; free some or set "
                                 "$LOTUS_SPILL_DIR to a larger disk") from None
            raise

    def array(self) -> np.ndarray:
        """All the values in memory (a stream that did not spill)."""
        return np.concatenate(self._mem) if self._mem else np.zeros(0)

    def read(self, off: int, m: int) -> np.ndarray:
        if self._file is None:
            return self.array()[off: off + m]
        self._file.flush()
        out = np.empty(m)
        self._file.seek(off * 8)
        self._file.readinto(memoryview(out).cast("B"))
        return out

    def chunks(self):
        for off in range(0, self.n, self.chunk):
            yield self.read(off, min(self.chunk, self.n - off))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem = []


def pairwise_sum(read, off: int, n: int, chunk: int) -> np.float64:
    """``np.add.reduce`` of the ``n`` values from ``off`` (``read(off, m)``: those values), exactly."""
    if n <= max(chunk, 128):  # numpy splits only above 128 values (its PW_BLOCKSIZE)
        return np.add.reduce(read(off, n), initial=0.0) if n else np.float64(0.0)
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(read, off, n2, chunk) + pairwise_sum(read, off + n2, n - n2, chunk)


def _ukey(v: np.ndarray) -> np.ndarray:
    """Unsigned keys ordered as the floats are (negative ones' bits inverted, positive ones' sign set)."""
    b = v.view(np.uint64)
    return np.where(b >> np.uint64(63), ~b, b | np.uint64(1 << 63))


def _with_prefix(u: np.ndarray, prefix: int, bits: int) -> np.ndarray:
    return np.ones(len(u), bool) if bits == 0 else (u >> np.uint64(64 - bits)) == np.uint64(prefix)


def order_stats(fl: Floats, ks: list[int]) -> dict[int, np.float64]:
    """The ``k``-th smallest value (0-based) for each ``k`` of ``ks``: ``np.partition(a, k)[k]``."""
    found: dict[int, np.float64] = {}
    # k -> (key prefix known, its bits, rank among the values with that prefix, gather them next pass)
    todo = {k: (0, 0, k, False) for k in ks}
    while todo:
        hist = {t[:2]: np.zeros(_BINS, np.int64) for t in todo.values() if not t[3]}
        gather: dict[tuple[int, int], list[np.ndarray]] = {t[:2]: [] for t in todo.values() if t[3]}
        for c in fl.chunks():
            u = _ukey(c)
            for (prefix, bits), h in hist.items():
                sel = u[_with_prefix(u, prefix, bits)]
                h += np.bincount(((sel >> np.uint64(48 - bits)) & np.uint64(_BINS - 1)).astype(np.intp),
                                 minlength=_BINS)
            for (prefix, bits), out in gather.items():
                out.append(c[_with_prefix(u, prefix, bits)])
        for k, (prefix, bits, r, gathered) in list(todo.items()):
            if gathered:
                found[k] = np.partition(np.concatenate(gather[(prefix, bits)]), r)[r]
                del todo[k]
                continue
            h = hist[(prefix, bits)]
            cum = np.cumsum(h)
            b = int(np.searchsorted(cum, r, side="right"))
            r -= int(cum[b - 1]) if b else 0
            # few enough values with this prefix (or all of the key known): gathered and sorted next pass
            todo[k] = (prefix << 16 | b, bits + 16, r, int(h[b]) <= fl.chunk or bits + 16 == 64)
    return found


def percentiles(fl: Floats, pcts=None) -> np.ndarray:
    """``np.percentile(values, pcts)`` (method ``linear``) of a stream of values without NaN."""
    q = np.true_divide(_PCTS if pcts is None else pcts, 100)
    n = fl.n
    virtual = (n - 1) * q
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above] = -1
    nxt[above] = -1
    prev_i, nxt_i = prev.astype(np.intp), nxt.astype(np.intp)
    prev_i[prev_i < 0] += n
    nxt_i[nxt_i < 0] += n
    got = order_stats(fl, sorted(set(prev_i.tolist()) | set(nxt_i.tolist())))
    a = np.array([got[i] for i in prev_i.tolist()])
    b = np.array([got[i] for i in nxt_i.tolist()])
    t = np.asanyarray(np.asanyarray(virtual - prev.astype(np.intp)), dtype=virtual.dtype)
    diff_b_a = b - a  # numpy's _lerp
    out = np.add(a, diff_b_a * t)
    np.subtract(b, diff_b_a * (1 - t), out=out, where=t >= 0.5, casting="unsafe", dtype=type(out.dtype))
    return out


def moments(fl: Floats) -> tuple[np.float64, np.float64, np.float64]:
    """(sum, mean, std) of the stream as ``a.sum()``, ``a.mean()`` and ``a.std()`` give them."""
    n = fl.n
    total = pairwise_sum(fl.read, 0, n, fl.chunk)
    mean = total.dtype.type(total / n)
    mean_k = np.true_divide(np.array([total]), n)  # _var's mean: an array divided in place, kept as one

    def squares(off: int, m: int) -> np.ndarray:
        x = np.asanyarray(fl.read(off, m) - mean_k)
        return np.multiply(x, x, out=x)

    var = pairwise_sum(squares, 0, n, fl.chunk)
    var = var.dtype.type(var / n)
    return total, mean, var.dtype.type(np.sqrt(var))


def describe(fl: Floats) -> dict:
    """:func:`lotus.analysis.describe.describe_ms` of the values of ``fl`` (already without NaN and in ms)."""
    if not fl.spilled:
        return describe_clean(fl.array())
    if not fl.n:
        return describe_clean(np.zeros(0))
    total, mean, std = moments(fl)
    return stat_dict(fl.n, total, mean, std, fl.lo, fl.hi, percentiles(fl))
