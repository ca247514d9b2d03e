"""One pandas DataFrame from DataFrames of the same columns, copied into columns allocated once (the compact
batches table's frames, :mod:`lotus.query.batchtable`: no concat of the pieces, no second copy)."""

from __future__ import annotations

import numpy as np


def assemble(pieces, n: int, columns: list[str] | None = None, rows: np.ndarray | None = None):
    """One DataFrame of ``n`` rows from DataFrames of the same columns and dtypes (``pieces``, in order),
    each copied into columns allocated once: nullable integer and boolean columns as their values and
    masks, categoricals as their codes (the same dtype), numpy columns as they are; ``attrs`` of the
    first piece (every piece has the same); ``columns``: only those; ``rows``: a boolean mask over the
    pieces' rows, only those kept (``n`` of them)."""
    import pandas as pd

    dtypes: dict = {}
    cols: dict = {}
    pos = 0
    start = 0  # of the piece, in the pieces' rows
    for piece in pieces:
        if columns is not None:
            piece = piece[list(columns)]
        if rows is not None:
            m = len(piece)
            piece = piece[rows[start: start + m]]
            start += m
        if not dtypes:
            dtypes = dict(piece.dtypes)
            for c in piece.columns:
                a = piece[c].array
                if isinstance(piece[c].dtype, pd.CategoricalDtype):
                    cols[c] = np.empty(n, np.asarray(a.codes).dtype)
                elif hasattr(a, "_mask"):
                    cols[c] = (np.empty(n, a._data.dtype), np.empty(n, bool))
                else:
                    cols[c] = np.empty(n, piece[c].dtype)
        m = len(piece)
        for c, dst in cols.items():
            a = piece[c].array
            if isinstance(dst, tuple):
                dst[0][pos: pos + m] = a._data
                dst[1][pos: pos + m] = a._mask
            elif isinstance(piece[c].dtype, pd.CategoricalDtype):
                dst[pos: pos + m] = np.asarray(a.codes)
            else:
                dst[pos: pos + m] = piece[c].to_numpy()
        pos += m
        attrs = piece.attrs
        del piece, a
    assert dtypes and pos == n, (pos, n)
    out = {}
    for c, dst in cols.items():
        dtype = dtypes[c]
        if isinstance(dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical.from_codes(dst, dtype=dtype)
        elif isinstance(dst, tuple):
            out[c] = (pd.arrays.BooleanArray if dtype == "boolean" else pd.arrays.IntegerArray)(*dst)
        else:
            out[c] = dst
    del cols
    df = pd.DataFrame(out, copy=False)
    df.attrs.update(attrs)
    return df


__all__ = ["assemble"]
