"""Export of a run's events and batches DataFrames to Parquet (readable by pandas, polars, DuckDB...)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _attrs_json(df) -> bytes:
    return json.dumps({k: v for k, v in df.attrs.items() if k != "op_engine"}, default=str).encode()


ROW_GROUP_ROWS = 1 << 20  # pyarrow's default row group of pq.write_table (a file written whole)
PIECE_ROWS = 1 << 17  # rows of a scanned run's batches converted at a time (a divisor of ROW_GROUP_ROWS)


def export_parquet(events, batches, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``events.parquet`` and ``batches.parquet`` in ``out_dir``; the run's file list and
    DataLoader descriptions (``events.attrs``) go to the Parquet metadata key ``lotus``. ``batches``: a
    DataFrame, or a scanned run's :class:`lotus.query.BatchTable`, written a piece at a time
    (:func:`_write_pieces`)."""
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    engine = events.attrs.get("op_engine")
    if engine is not None:  # a scanned run: every event streamed from the files, chunk by chunk
        from lotus.query import export_events

        attrs = {k: v for k, v in events.attrs.items() if k != "op_engine"}
        paths.append(export_events(engine, out / "events.parquet", json.dumps(attrs, default=str).encode()))
    if hasattr(batches, "frames"):  # a scanned run's table: its frame a piece at a time
        paths.append(_write_pieces(batches.frames(PIECE_ROWS), out / "batches.parquet"))
        batches = None
    for name, df in (("events", events), ("batches", batches)):
        if (name == "events" and engine is not None) or df is None:
            continue
        p = out / f"{name}.parquet"
        pq.write_table(_table(df), p, compression="zstd")
        paths.append(p)
    return paths


def _table(df):
    """``df`` as an Arrow table, ``df.attrs`` (less the engine) in the metadata key ``lotus``."""
    import pyarrow as pa

    plain = df.copy(deep=False)
    plain.attrs = {}
    table = pa.Table.from_pandas(plain, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"lotus"] = _attrs_json(df)
    return table.replace_schema_metadata(meta)


def _write_pieces(frames, path: Path) -> Path:
    """The DataFrame given in pieces (``frames``: DataFrames of the same columns and dtypes, in order) to
    ``path``, as ``pq.write_table`` writes the whole one: the same schema, metadata, rows and row groups
    (:data:`ROW_GROUP_ROWS` rows), each written once its rows are there (at most a row group of Arrow
    columns is held, never the whole frame). A row group's columns are written from the pieces' chunks:
    where a column's dictionary outgrows the writer's limit, the switch to plain encoding falls at
    another row than in the one contiguous array of ``pq.write_table`` (seen at 431k batches), so the
    bytes may differ while the contents read back are the same; a single piece gives the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.with_name(path.name + ".tmp")
    writer, held, rows = None, [], 0
    try:
        for df in frames:
            t = _table(df)
            del df
            if writer is None:
                writer = pq.ParquetWriter(tmp, t.schema, compression="zstd")
            elif not t.schema.equals(writer.schema, check_metadata=True):
                raise RuntimeError(f"{path}: a piece of the batches has another schema than the first")
            held.append(t)
            rows += t.num_rows
            while rows >= ROW_GROUP_ROWS:
                whole = pa.concat_tables(held)
                writer.write_table(whole.slice(0, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
                rest = whole.slice(ROW_GROUP_ROWS)
                held, rows = ([rest] if rest.num_rows else []), rest.num_rows
                del whole
        if held and rows:
            writer.write_table(pa.concat_tables(held), row_group_size=ROW_GROUP_ROWS)
        if writer is not None:
            writer.close()
            writer = None
            os.replace(tmp, path)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return path


def read_parquet_attrs(path: str | os.PathLike) -> dict:
    """The ``lotus`` metadata (run, path, files) of a Parquet file written by :func:`export_parquet`."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(b"lotus", b"{}"))
