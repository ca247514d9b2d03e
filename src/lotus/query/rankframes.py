"""A scanned run's batches a few whole ranks at a time (``lotus analyze ranks`` at 1B events).

:func:`rank_pieces` gives the rows of :meth:`lotus.query.batchtable.BatchTable.frame` in parts of consecutive
whole ranks, as many as fit :data:`RANK_ROWS` rows (one rank at least), each as the
:meth:`~lotus.query.batchtable.BatchTable.frames` pieces of its rows (cut at the ranks' rows: the table is
sorted by rank first), so that a consumer holds one piece at a time, never a part's nor the whole frame's
rows (docs/results/whatif_ranks_1b_2cpu.txt: 64 ranks of 1B events, 1,695 -> 703 MiB with each part's
pieces assembled; one rank of 1B events read a piece at a time).
"""

from __future__ import annotations

import numpy as np

from lotus.query import batchtable as bt

RANK_ROWS = 1 << 19  # rows of a part of rank_pieces() (whole ranks: more where one rank has more)


def rank_parts(table, rows: int | None = None) -> list[tuple[list[int], int]] | None:
    """The parts of :func:`rank_pieces`: (ranks, end row) of each; None for the one frame (a partial table,
    one without keys, or one of :data:`lotus.query.batchtable.FRAME_ROWS` rows or fewer)."""
    if table.partial or not table.any_keys or len(table) <= bt.FRAME_ROWS:
        return None
    budget = RANK_ROWS if rows is None else rows
    rank = table.keys[:, 0]
    ends = np.cumsum(table.counts)
    cut = np.r_[np.flatnonzero(rank[1:] != rank[:-1]), len(rank) - 1]  # each rank's last group
    parts: list[tuple[list[int], int]] = []
    for g in cut.tolist():
        r, hi = int(rank[g]), int(ends[g])
        if parts and hi - (parts[-2][1] if len(parts) > 1 else 0) <= budget:  # the last part with this rank
            parts[-1] = ([*parts[-1][0], r], hi)
        else:
            parts.append(([r], hi))
    return parts


def rank_pieces(table, columns: list[str] | None = None, rows: int | None = None):
    """``(ranks, pieces)`` in rank order, of whole ranks, as many consecutive ones as fit ``rows``
    (:data:`RANK_ROWS`; one at least): ``pieces`` an iterator of DataFrames, the ranks' rows of
    ``table.frame(columns)`` in order, each of at most :data:`lotus.query.batchtable.FRAME_ROWS` rows and of
    the same columns, dtypes, values and ``attrs`` (indexed from 0), to be read before the next part. A table
    :func:`rank_parts` does not cut: one part, the one frame, its ranks None."""
    parts = rank_parts(table, rows)
    if parts is None:
        yield None, iter([table.frame(columns)])
        return
    counts = columns is None or "n_samples" in columns
    pieces = table.frames(bt.FRAME_ROWS, counts=counts, bounds=[e for _, e in parts])
    lo = 0  # the part's first row
    for ranks, hi in parts:
        if hi > lo:  # its pieces are read as they are used (none is held after)
            yield ranks, (p if columns is None else p[list(columns)] for p in _rows_of(pieces, hi - lo))
        lo = hi
    assert next(pieces, None) is None


def _rows_of(pieces, n: int):
    """The next pieces of the iterator ``pieces`` that hold ``n`` rows in all (they end at the ``n``-th)."""
    got = 0
    while got < n:
        piece = next(pieces)
        got += len(piece)
        yield piece
        del piece
    assert got == n, (got, n)


__all__ = ["RANK_ROWS", "rank_parts", "rank_pieces"]
