"""Export of a run's events and batches DataFrames to Parquet (readable by pandas, polars, DuckDB...)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _attrs_json(df) -> bytes:
    return json.dumps({k: v for k, v in df.attrs.items() if k != "op_engine"}, default=str).encode()


def export_parquet(events, batches, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``events.parquet`` and ``batches.parquet`` in ``out_dir``; the run's file list and
    DataLoader descriptions (``events.attrs``) go to the Parquet metadata key ``lotus``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    engine = events.attrs.get("op_engine")
    if engine is not None:  # a scanned run: every event streamed from the files, chunk by chunk
        from lotus.query import export_events

        attrs = {k: v for k, v in events.attrs.items() if k != "op_engine"}
        paths.append(export_events(engine, out / "events.parquet", json.dumps(attrs, default=str).encode()))
    for name, df in (("events", events), ("batches", batches)):
        if name == "events" and engine is not None:
            continue
        plain = df.copy(deep=False)
        plain.attrs = {}
        table = pa.Table.from_pandas(plain, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[b"lotus"] = _attrs_json(df)
        table = table.replace_schema_metadata(meta)
        p = out / f"{name}.parquet"
        pq.write_table(table, p, compression="zstd")
        paths.append(p)
    return paths


def read_parquet_attrs(path: str | os.PathLike) -> dict:
    """The ``lotus`` metadata (run, path, files) of a Parquet file written by :func:`export_parquet`."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(b"lotus", b"{}"))
