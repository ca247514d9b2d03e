"""Merging the parts of one scan (:class:`lotus.query.scanfiles.ScanPart`, each over a run of consecutive
files) into what one pass over all the files, in their order, would have kept: the same bytes out.

* names: each part's new names get run-wide codes in the order the part met them, parts in file order:
  the order one pass meets them; kept rows and file entries are concatenated, codes translated;
* op slots: one pass numbers the op names' slots in the order of their codes, so the run's slots are its
  op codes sorted;
* moments: counts, sums (integer durations: exact), histograms, minima and maxima add up in any order;
  the means and M2 (Chan's merge, floating point) are merged again chunk by chunk in file order from the
  chunks' (count, sum, sum of squares): the additions one pass makes, in its order;
* per-epoch and per-rank op totals (integer sums, exact below 2**53 ns), the census (counts, extremes,
  sets) and the first row of each code (a part's rows after the earlier parts' records) add up;
* the folded batch-level columns: :meth:`lotus.query.batchparts.BatchParts.absorb`, in file order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np

from lotus.query.scanfiles import ScanPart


def merge_parts(parts: Iterable[ScanPart]) -> ScanPart:
    """One :class:`ScanPart` from ``parts`` in file order (module doc); a single part is returned as it is.
    The parts of several must have recorded their chunks (:class:`ScanContext` ``replay``)."""
    from lotus.query.moments import _Moments
    from lotus.trace.events import Accumulator

    it = iter(parts)
    first = next(it)
    second = next(it, None)
    if second is None:
        return first
    out = ScanPart(Accumulator(), [], _Moments())
    if first.census is not None:
        from lotus.query.census import Census

        out.census = Census()
    if first.batch_parts is not None:
        from lotus.query.batchparts import BatchParts

        out.batch_parts = BatchParts(first.batch_parts.where, first.batch_parts.columns)
    if first.op_reduce is not None:  # per-batch op sums add up; op value files concatenate in file order
        from lotus.query.opreduce import OpReduce

        out.op_reduce = OpReduce(values=first.op_reduce.values is not None)
    for part in itertools.chain((first, second), it):  # slots stay in code order: a part's new codes come after
        _absorb(out, part)
    return out


def _spread(a: np.ndarray, where: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[where] = a
    return out


def _absorb(out: ScanPart, part: ScanPart) -> None:
    acc = out.acc
    remap = np.array([acc.code(n, c) for n, c in zip(part.acc.names, part.acc.cats, strict=True)], np.int64)
    codes = [int(remap[c]) for c in part.slot_codes]  # the part's slot -> run-wide code
    for k, c in enumerate(codes):
        if c not in out.slot_codes:
            out.slot_codes.append(c)
        _hist_into(out.moments, part.moments, k, c, out.slot_codes)
    where = np.array([out.slot_codes.index(c) for c in codes], np.int64)
    if out.op_reduce is not None:
        out.op_reduce.absorb(part.op_reduce, where, len(out.slot_codes))
    for n, s, sq in part.chunks:  # the means and M2 merged chunk by chunk, in file order
        out.moments.merge(*(_spread(a, where[: len(n)], len(out.slot_codes)) for a in (n, s, sq)))
    for c, row in part.first.items():
        out.first.setdefault(int(remap[c]), out.rows + row)
    out.rows += part.rows
    src = part.acc
    acc.lengths += src.lengths
    for col, values in src.parts.items():
        if col == "code":
            values = [int(remap[v]) if not isinstance(v, np.ndarray) else remap[v].astype(v.dtype) for v in values]
        acc.parts[col] += values
    acc.files += src.files
    for mine, theirs in ((out.by_epoch, part.by_epoch), (out.by_rank, part.by_rank)):
        for key, row in theirs.items():
            mine[key] = _add_slots(mine.get(key), row, codes, out.slot_codes)
    if out.census is not None and part.census is not None:
        _census_into(out.census, part.census, remap)
    if part.batch_parts is not None:
        out.batch_parts.absorb(part.batch_parts)
        part.batch_parts = None


def _hist_into(m, pm, k: int, code: int, slot_codes: list[int]) -> None:
    """The part's slot ``k`` (code ``code``) into the merged histograms, minima and maxima."""
    j = slot_codes.index(code)
    m.grow(len(slot_codes))
    if k < len(pm.n):
        m.hist[j] += pm.hist[k]
        m.lo[j], m.hi[j] = min(m.lo[j], pm.lo[k]), max(m.hi[j], pm.hi[k])
        m.lo_bin[j], m.hi_bin[j] = min(m.lo_bin[j], pm.lo_bin[k]), max(m.hi_bin[j], pm.hi_bin[k])


def _add_slots(row: np.ndarray | None, theirs: np.ndarray, codes: list[int], slot_codes: list[int]) -> np.ndarray:
    out = np.zeros(len(slot_codes)) if row is None else np.pad(row, (0, len(slot_codes) - len(row)))
    for k, v in enumerate(theirs.tolist()):
        out[slot_codes.index(codes[k])] += v
    return out


def _census_into(c, pc, remap: np.ndarray) -> None:
    if len(pc.counts):
        top = int(remap[: len(pc.counts)].max()) + 1
        if top > len(c.counts):
            c.counts = np.concatenate([c.counts, np.zeros(top - len(c.counts), np.int64)])
        np.add.at(c.counts, remap[: len(pc.counts)], pc.counts)
    if pc.start_ns is not None:
        c.start_ns = pc.start_ns if c.start_ns is None else min(c.start_ns, pc.start_ns)
        c.end_ns = pc.end_ns if c.end_ns is None else max(c.end_ns, pc.end_ns)
    c.ranks |= pc.ranks
    c.epochs |= pc.epochs
