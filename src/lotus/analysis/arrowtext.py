"""Vectorised text formatting with pyarrow string kernels (for the streamed Chrome trace writer)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def open_out(path: Path):
    """A binary file for writing; gzip-compressed when the name ends in .gz."""
    if path.suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=3)
    return open(path, "wb")


def num(values: np.ndarray):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pa.array(values), pa.string())


def us(rel_ns: np.ndarray):
    """ns (int64) -> decimal µs strings with exactly 3 decimals (exact, negative values allowed)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    neg = rel_ns < 0
    q, r = np.divmod(np.abs(rel_ns), 1000)
    frac = pc.utf8_lpad(num(r), width=3, padding="0")
    out = pc.binary_join_element_wise(num(q), frac, ".")
    if neg.any():
        out = pc.if_else(pa.array(neg), pc.binary_join_element_wise("-", out, ""), out)
    return out


def write_strings(f, arr) -> None:
    """Write the UTF-8 data of a pyarrow string array (elements back to back)."""
    arr = arr.combine_chunks() if hasattr(arr, "combine_chunks") else arr
    if len(arr) == 0:
        return
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset: arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    f.write(memoryview(data)[int(offsets[0]): int(offsets[-1])])
