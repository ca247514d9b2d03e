"""The batches of a scanned run as compact columns (:class:`BatchTable`), made by
:meth:`lotus.query.batchparts.BatchParts.finish`.

The batches DataFrame (:mod:`lotus.query.batches`) holds 27 columns, most of them nullable Int64 (9
bytes a value), several derivable from the others. A :class:`BatchTable` keeps only what the
batch-level events gave, as plain numpy arrays with the dtype's minimum as "missing": timestamps
int64, durations, flags and ids int32 where they fit; columns no event filled are absent; the key's
rank, loader and epoch are stored once per (rank, loader, epoch) group; derived columns (end of
preprocessing, delay, failed, buffered...) are computed when asked for (:meth:`BatchTable.values`).
About 90 bytes per batch on a typical trace instead of ~250.

The summaries that ``lotus analyze stats|wait|verdict`` print are computed from these arrays
(:mod:`lotus.analysis.compact`); :meth:`BatchTable.frame` builds the full DataFrame, identical to the
in-memory path's, for everything else (:class:`lotus.analysis.runs.Config` does it on first use).

The columns of a scanned run are on disk (:mod:`lotus.query.spill`); the summaries read them as
:meth:`BatchTable.views` of :data:`ROWS` rows, whose pages are dropped after each, so that their memory
does not grow with the run.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from lotus.query import spill
from lotus.query.outcomes import detail_counts_share
from lotus.trace import schema as S

_I32_MIN, _I64_MIN = int(np.iinfo(np.int32).min), int(np.iinfo(np.int64).min)
_KEY = ("rank", "loader", "epoch", "batch_id")
ROWS = 1 << 19  # rows of a view (views(): the summaries read the table this many rows at a time)
FRAME_ROWS = 1 << 16  # rows of a piece of frame() (its temporaries are a piece's, not the whole frame's)
_BATCH_ROW_COLUMNS = ("_fetch_flags", "consumed_ns", "_arrive_flags", "_exhausted_worker", "dispatch_worker",
                      "dispatch_ns")


def _raw(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, valid) of a stored column."""
    miss = _I64_MIN if a.dtype == np.int64 else _I32_MIN
    valid = a != miss
    return a.astype(np.int64, copy=False), valid


class BatchTable:
    """One row per batch key, sorted by (rank, loader, epoch, batch_id), as compact columns (module doc)."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray, batch_id: np.ndarray, raw: dict, attrs: dict):
        self.keys = keys  # (groups, 3) int64: rank, loader, epoch of each group, in order
        self.counts = counts  # rows of each group
        self.batch_id = batch_id
        self.raw = raw  # joined column name (lotus.query.batchparts.COLUMNS) -> array
        self.attrs = dict(attrs)
        self.any_keys = len(keys) > 0  # any batch-level event at all (else the empty frame of no events)
        self._failed = None  # failed(), once asked for
        self.partial = False  # only the summaries' columns were kept (BatchParts(columns=...)): no frame()
        self.first_group = 0  # of a view: the index in its table's keys of its first group
        self.offset = 0  # of a view: its first row's index in its table

    def view(self, lo: int, hi: int) -> BatchTable:
        """Rows ``lo:hi`` as a table (the columns are slices: no copy; its groups are the groups those
        rows belong to, cut to them)."""
        ends = np.cumsum(self.counts)
        g0 = int(np.searchsorted(ends, lo, side="right"))
        g1 = int(np.searchsorted(ends, hi, side="left")) + 1 if hi > lo else g0
        starts = ends - self.counts
        counts = np.minimum(ends[g0:g1], hi) - np.maximum(starts[g0:g1], lo)
        v = BatchTable(self.keys[g0:g1], counts, self.batch_id[lo:hi], {c: a[lo:hi] for c, a in self.raw.items()},
                       self.attrs)
        v.partial, v.first_group, v.offset = self.partial, self.first_group + g0, self.offset + lo
        v.any_keys = self.any_keys
        return v

    def views(self, rows: int | None = None):
        """The table as views of ``rows`` (:data:`ROWS`) rows, in order; the spilled columns' pages are
        dropped after each (:func:`lotus.query.spill.trim`)."""
        step = ROWS if rows is None else rows
        for lo in range(0, len(self), step):
            yield self.view(lo, min(len(self), lo + step))
            self.release()

    def release(self) -> None:
        """Drop what was read of the spilled columns from the resident set (:func:`lotus.query.spill.drop`)."""
        spill.drop(self.batch_id, *self.raw.values())

    def group_spans(self):
        """(group index, first row, end row) of every group."""
        ends = np.cumsum(self.counts).tolist()
        return [(g, e - n, e) for g, (e, n) in enumerate(zip(ends, self.counts.tolist(), strict=True))]

    def failed_rows(self) -> np.ndarray:
        """Indices of the failed batches (a view at a time)."""
        parts = [np.flatnonzero(v.failed()) + v.offset - self.offset for v in self.views()]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.batch_id)

    @property
    def nbytes(self) -> int:
        return self.batch_id.nbytes + sum(a.nbytes for a in self.raw.values()) + self.keys.nbytes

    def group_ids(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The group (index into :attr:`keys`) of every row, or of ``rows``."""
        if rows is not None:
            return np.searchsorted(np.cumsum(self.counts), rows, side="right")
        return np.repeat(np.arange(len(self.keys), dtype=np.int32), self.counts)

    def only_batches(self) -> BatchTable:
        """Keep the keys that are batches (:func:`lotus.query.batches.batch_rows`: the same rule, warnings
        and counts in ``attrs``); empty groups are dropped. Returns self."""
        import pandas as pd

        from lotus.query.batches import batch_rows

        # the rule is row by row: only keys neither fetched nor consumed, or exhausted, can be anything but a
        # batch or count in attrs; batch_rows sees those (usually none) and the others are batches
        look = np.concatenate([np.zeros(0, np.int64), *(v.look_rows() + v.offset - self.offset for v in self.views())])
        cols = {"rank": self.values("rank", look)[0]}
        for c in _BATCH_ROW_COLUMNS:
            if c in self.raw:
                v, ok = _raw(self.raw[c][look])
                cols[c] = pd.arrays.IntegerArray(v, ~ok)
        sub, counted = batch_rows(pd.DataFrame(cols, copy=False), self.attrs.get("path", "trace"))
        del cols
        self.attrs.update(counted)
        drop = look[~sub]
        if len(drop):
            self._drop(drop)
        keep = self.counts > 0
        self.keys, self.counts = self.keys[keep], self.counts[keep]
        self._warn_clocks()
        return self

    def _warn_clocks(self) -> None:
        """:func:`lotus.query.batches.warn_clock_skew` of the table (batches_from_joined's warning)."""
        from lotus.query.batches import warn_clock_skew

        late = {"consumed_ns": 0, "arrive_ns": 0}
        for v in self.views():
            end, e_ok = v.values("prep_end_ns")
            for c in late:
                t, ok = v._stored(c)
                late[c] += int((ok & e_ok & (t < end)).sum())
        warn_clock_skew(self.attrs.get("path", "trace"), late["consumed_ns"], late["arrive_ns"])

    def look_rows(self) -> np.ndarray:
        """Rows that may not be batches (only_batches)."""
        look = ~(self.valid("_fetch_flags") | self.valid("consumed_ns"))
        look |= self.valid("_exhausted_worker")
        if "_arrive_flags" in self.raw:  # valid (the sentinel is negative), positive, the flag set
            f = self.raw["_arrive_flags"]
            look |= (f > 0) & ((f & S.ARRIVE_EXHAUSTED) != 0)
        return np.flatnonzero(look)

    def _drop(self, drop: np.ndarray) -> None:
        """Leave out the rows ``drop`` (sorted indices), a view at a time (spilled columns stay spilled)."""
        self.counts = self.counts - np.bincount(self.group_ids(drop), minlength=len(self.keys)).astype(np.int64)
        n = len(self) - len(drop)
        bounds = [(v.offset, v.offset + len(v)) for v in self.views()]
        cols = {"batch_id": self.batch_id, **self.raw}
        for c, a in cols.items():
            out = spill.array(n, a.dtype) if spill.is_spilled(a) else np.empty(n, a.dtype)
            pos = 0
            for lo, hi in bounds:
                d = drop[(drop >= lo) & (drop < hi)] - lo
                keep = np.ones(hi - lo, bool)
                keep[d] = False
                part = a[lo:hi][keep]
                out[pos: pos + len(part)] = part
                pos += len(part)
                spill.drop(a, out)
            cols[c] = out
        self.batch_id = cols.pop("batch_id")
        self.raw = cols
        self._failed = None

    def has(self, name: str) -> bool:
        return name in self.raw

    def values(self, name: str, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(int64 values, valid mask) of a column of the batches DataFrame (module doc of
        :mod:`lotus.query.batches`; ``failed`` and ``buffered`` as 0/1) or of the joined parts (``_wait_flags``),
        of every row or of ``rows`` (indices: taken before widening, so that the temporaries are theirs);
        values where not valid are unspecified."""
        n = len(self) if rows is None else len(rows)
        if name in _KEY[:3]:
            col = self.keys[:, _KEY.index(name)]
            if rows is None:
                return np.repeat(col, self.counts), np.ones(n, bool)
            return col[self.group_ids(rows)], np.ones(n, bool)
        if name == "batch_id":
            return (self.batch_id if rows is None else self.batch_id[rows]).astype(np.int64), np.ones(n, bool)
        if name == "worker_id":  # batches seen only from the main side: the worker it was dispatched to
            v, ok = self._stored("worker_id", rows)
            d, d_ok = self._stored("dispatch_worker", rows)
            return np.where(ok, v, d), ok | d_ok
        if name in ("gpu_wait_ns", "gpu_step_ns"):  # a timing its valid flag says is not: missing
            v, ok = self._stored(name, rows)
            flag, f_ok = self._stored("_gpu_wait_valid" if name == "gpu_wait_ns" else "_gpu_step_valid", rows)
            return v, ok & (~f_ok | (flag != 0))
        if name == "prep_end_ns":
            va, oka = self._stored("prep_start_ns", rows)
            vb, okb = self._stored("prep_dur_ns", rows)
            return va + vb, oka & okb
        if name in ("delay_ns", "queue_ns"):  # < 0: clocks that disagree (batches_from_joined): unknown
            end, e_ok = self.values("prep_end_ns", rows)
            v, ok = self._stored("consumed_ns" if name == "delay_ns" else "arrive_ns", rows)
            return v - end, ok & e_ok & (v >= end)
        if name == "failed":  # -1: no flags (original logs)
            f = self.failed()
            return (f if rows is None else f[rows]).astype(np.int64), np.ones(n, bool)
        if name == "buffered":
            f, ok = self._stored("_wait_flags", rows)
            return f & 1, ok & (f >= 0)
        return self._stored(name, rows)

    def valid(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The valid mask of a stored column (``values(name, rows)[1]`` without the values)."""
        if name not in self.raw:
            return np.zeros(len(self) if rows is None else len(rows), bool)
        a = self.raw[name] if rows is None else self.raw[name][rows]
        return a != (_I64_MIN if a.dtype == np.int64 else _I32_MIN)

    def _stored(self, name: str, rows=None) -> tuple[np.ndarray, np.ndarray]:
        if name in self.raw:
            a = self.raw[name]
            return _raw(a if rows is None else a[rows])
        n = len(self) if rows is None else len(rows)
        return np.zeros(n, np.int64), np.zeros(n, bool)

    def failed(self) -> np.ndarray:
        """Failed batches (bool; computed once, a byte a batch)."""
        if self._failed is None:
            f = self.raw.get("_fetch_flags")
            self._failed = (np.zeros(len(self), bool) if f is None
                            else (f != (_I64_MIN if f.dtype == np.int64 else _I32_MIN)) & (f > 0) & ((f & 1) != 0))
        return self._failed

    def outcome_summary(self) -> dict:
        """:func:`lotus.query.outcomes.outcome_summary` of the table."""
        from lotus.query.outcomes import outcomes_of

        f = self.failed_rows()
        w, ok = self.values("worker_id", f)
        return outcomes_of(len(self), self.values("rank", f)[0].tolist(), np.where(ok, w, -1).tolist(), self.attrs)

    def key_frame(self, rows: np.ndarray):
        """The key columns of ``rows`` (int64), a DataFrame (excluding batches from op statistics)."""
        import pandas as pd

        return pd.DataFrame({c: self.values(c, rows)[0] for c in _KEY})

    def frame(self, columns: list[str] | None = None, rows: np.ndarray | None = None):
        """The batches DataFrame of these rows: :func:`lotus.query.batches.batches_from_joined` on the
        columns, plus ``n_samples`` of batches without a collate from their per-sample events (another
        scan of the files, only when there are such batches); ``columns``: only those (in that order), the
        same values; ``rows``: a boolean mask of the rows kept (``frame(columns)[rows]``, indexed from 0).
        A table of more than :data:`FRAME_ROWS` rows is made from its :meth:`frames` of that many rows,
        each piece (its kept rows) copied into the columns of the whole frame allocated first: the peak is
        the frame and one piece, not the frame and the temporaries of making it (nor, with ``rows``, the
        frame of every row and its copy)."""
        counts = columns is None or "n_samples" in columns  # the extra scan only for the column it fills
        if rows is not None:
            rows = np.asarray(rows, dtype=bool)
            if len(rows) != len(self):
                raise ValueError(f"rows: a mask of {len(self)} rows, not {len(rows)}")
        if not self.partial and self.any_keys and len(self) > FRAME_ROWS:
            n = len(self) if rows is None else int(np.count_nonzero(rows))
            from lotus.query.assemble import assemble

            return assemble(self.frames(FRAME_ROWS, counts=counts), n, columns, rows)
        out = self._whole_frame(counts)
        out = out if columns is None else out[list(columns)]
        return out if rows is None else out[rows].reset_index(drop=True)

    def _whole_frame(self, counts: bool = True):
        """:meth:`frame` made in one go (``counts`` False: without the ``n_samples`` of batches without a
        collate, for a caller that does not read that column)."""
        if not self.any_keys:
            return self._joined_frame()
        out = self._joined_frame()
        engine = self.attrs.get("op_engine")
        if engine is not None and counts:
            from lotus.query.rescan import fill_sample_counts

            fill_sample_counts(engine, out)
        return out

    def _joined_frame(self, any_flagged: bool | None = None):
        """:meth:`frame` without the ``n_samples`` of batches without a collate."""
        import pandas as pd

        from lotus.query.batches import batches_from_joined, empty_batches

        if self.partial:
            raise RuntimeError("a table of the summaries' columns only makes no batches DataFrame: scan every column")
        if not self.any_keys:
            return empty_batches(self.attrs)
        cols = {c: self.values(c)[0] for c in _KEY}
        for c, a in self.raw.items():
            v, ok = _raw(a)
            cols[c] = pd.arrays.IntegerArray(v, ~ok)
        joined = pd.DataFrame(cols, copy=False)
        del cols
        return batches_from_joined(joined, self.attrs, only_batches=False, warn_clocks=False, any_flagged=any_flagged)

    def frames(self, rows: int | None = None, *, counts: bool = True, bounds: list[int] | None = None):
        """The batches DataFrame (:meth:`frame`) in pieces of ``rows`` (:data:`ROWS`) rows, in order: each
        piece holds the same columns, dtypes, values and ``attrs`` as those rows of :meth:`frame` (its index
        from 0), so that a consumer (``lotus export``) holds one piece at a time, never the whole frame.
        What depends on every row is computed first, a view at a time: whether any fetch is flagged a
        detail batch, and the per-sample counts of batches without a collate (one more scan, only when
        there are such batches; ``counts`` False: not made, for a caller that does not read ``n_samples``).
        ``bounds``: row indices (ascending) no piece crosses (a piece ends at each)."""
        if self.partial or not self.any_keys or not len(self):
            yield self._joined_frame()
            return
        step = ROWS if rows is None else rows
        any_flagged = False
        n_missing = []
        for v in self.views():
            f = v.raw.get("_fetch_flags")
            if f is not None and not any_flagged:
                miss = _I64_MIN if f.dtype == np.int64 else _I32_MIN
                any_flagged = bool(((f != miss) & (f > 0) & ((f & S.FETCH_DETAIL) != 0)).any())
            if counts:
                n_missing.append(np.flatnonzero(v.n_samples_missing()) + v.offset - self.offset)
        missing = np.concatenate(n_missing) if n_missing else np.zeros(0, np.int64)
        del n_missing
        engine = self.attrs.get("op_engine")
        found = None
        if engine is not None and len(missing):
            from lotus.query.rescan import fill_sample_counts, sample_counts

            found = sample_counts(engine, self.key_frame(missing))
        del missing
        cuts = [*sorted({*range(0, len(self), step), *(b for b in bounds or () if 0 < b < len(self))}), len(self)]
        for lo, hi in pairwise(cuts):
            out = self.view(lo, hi)._joined_frame(any_flagged)
            if found is not None:
                fill_sample_counts(engine, out, found)
            self.release()
            yield out

    def n_samples_missing(self) -> np.ndarray:
        """Rows whose ``n_samples`` the columns do not give (no collate with a count, nor per-sample
        counts): what :func:`lotus.query.batches.batches_from_joined` leaves missing."""
        n = np.zeros(len(self), bool)
        for c in ("_collate_n", "_n_sample", "_n_load"):
            if c in self.raw:
                v, ok = _raw(self.raw[c])
                n |= ok & (v > 0) if c != "_n_load" else ok
        return ~n


__all__ = ["BatchTable", "detail_counts_share"]
