"""The batches :func:`lotus.model.observation.observe` reads: a traced run (:class:`RunTrace`) and its main
loader's ok batches as DataFrames of a few columns at a time (:class:`Batches`).

A run read only to be fitted from a scanned run (:class:`TableRun`, ``load_run(columns=...)``) keeps its
batches as the engine's compact table (:class:`lotus.query.BatchTable`, ~90 bytes a batch, spilled to
disk) and makes a DataFrame of the columns a measure reads when it reads them, of the selected rows only
(:meth:`Batches.cols`): the fit never holds the whole batches DataFrame (~210 bytes a batch over the
model's 23 columns), so that its memory stays within the per-batch arrays it keeps. Each DataFrame holds
the same values as those columns and rows of the whole frame (:meth:`lotus.query.BatchTable.frame`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lotus.errors import InputError

KEY = ["rank", "epoch", "batch_id"]
_SELECT = ["rank", "loader", "epoch", "batch_id", "failed", "prep_dur_ns", "consumed_ns"]


@dataclass
class RunTrace:
    """One run of the job: its DataFrames and loader descriptions, and its page-cache state if known.

    ``cache_state``: ``"cold"`` for a probe whose dataset files were evicted first, ``"warm"`` for one
    read from the page cache, None (unlabelled: treated as warm, and the model says so).
    """

    events: object
    batches: object
    loaders: dict = field(default_factory=dict)
    name: str = "run"
    cache_state: str | None = None


class TableRun(RunTrace):
    """A scanned run read only to be fitted: its batches are the engine's table; :attr:`batches` (the
    DataFrame of ``columns``) is made on each access, not kept (module doc)."""

    def __init__(self, events, table, columns: list[str], loaders: dict | None = None, name: str = "run",
                 cache_state: str | None = None):
        self.table, self.columns = table, list(columns)
        super().__init__(events, None, loaders or {}, name=name, cache_state=cache_state)

    @property
    def batches(self):
        kept = self.__dict__.get("_batches")
        return kept if kept is not None else self.table.frame(self.columns)

    @batches.setter
    def batches(self, value) -> None:
        self.__dict__["_batches"] = value


def columns_of(run: RunTrace, names: list[str]):
    """Columns ``names`` of every batch of ``run`` (of a :class:`TableRun`: made of only those)."""
    table = getattr(run, "table", None)
    return table.frame(list(names)) if table is not None else run.batches[list(names)]


def _rows(df, keep: np.ndarray):
    """``df[keep]``, or ``df`` itself where every row is kept (no copy)."""
    return df if keep.all() else df[keep]


def _sorted(df, cols: list[str]) -> bool:
    """Whether the rows are in strictly increasing order of ``cols`` (then sort_values, stable or not, keeps
    them as they are); False where a key repeats or a value is missing."""
    if len(df) < 2:
        return True
    lt = np.zeros(len(df) - 1, bool)  # row i < row i+1, decided by the columns so far
    eq = np.ones(len(df) - 1, bool)
    for c in cols:
        if df[c].isna().any():
            return False
        v = df[c].to_numpy()
        a, b = v[:-1], v[1:]
        lt |= eq & (a < b)
        eq &= a == b
    return bool(lt.all())


def main_loader(batches) -> int:
    counts = batches.groupby("loader").size()
    return int(counts.idxmax())


def _usable(b) -> np.ndarray:
    """Ok batches that were fetched or consumed (:func:`lotus.query.ok_batches`, then either time known)."""
    from lotus.query import failed_mask

    return ~failed_mask(b) & (b["prep_dur_ns"].notna().to_numpy(dtype=bool, na_value=False)
                              | b["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False))


@dataclass
class Batches:
    """The main loader's ok batches of a run, sorted by (rank, epoch, batch_id): ``frame`` (the whole
    DataFrame, a caller's run) or the rows ``keep`` of ``table`` (a :class:`TableRun`)."""

    loader: int
    rows: int
    frame: object = None
    table: object = None
    keep: np.ndarray | None = None
    whole: object = None  # every batch of the run (a caller's run): the measured rate's

    def __post_init__(self) -> None:
        self.all = self.keep is None or bool(self.keep.all())  # every row of the table kept: no mask to apply

    def cols(self, names: list[str]):
        """These columns of the batches, a DataFrame indexed from 0 (module doc)."""
        if self.table is None:  # a caller's frame: the columns it has (a measure reads those it needs)
            return self.frame[[c for c in names if c in self.frame]]
        return self.table.frame(list(names), rows=None if self.all else self.keep)

    def has(self, name: str) -> bool:
        from lotus.query import BATCH_COLUMNS

        return name in BATCH_COLUMNS if self.table is not None else name in self.frame

    def rate_rows(self, names: tuple[str, ...]):
        """The columns ``names`` (those present) of the batches :func:`lotus.analysis.throughput.loader_rates`
        measures the main loader on: every batch of a caller's run; of a table, the ok batches of the main
        loader that were consumed (the rates of the others are not read)."""
        if self.table is None:
            return self.whole
        t = self.table.frame(["loader", "failed", "consumed_ns"])
        from lotus.query import failed_mask

        keep = (~failed_mask(t) & t["consumed_ns"].notna().to_numpy(dtype=bool, na_value=False)
                & (t["loader"].to_numpy() == self.loader))
        del t
        cols = [c for c in names if c not in ("failed", "prep_dur_ns")]  # all ok, none replayed-only asked
        return self.table.frame(cols, rows=None if keep.all() else keep)


def select(run: RunTrace, name: str) -> Batches:
    """The main loader's usable batches of ``run`` (module doc); InputError where there are none."""
    table = getattr(run, "table", None)
    if table is not None:
        s = table.frame(_SELECT)
        keep = _usable(s)
        if not keep.any():
            raise InputError(f"{name}: no batches in the trace: nothing to fit")
        loader = main_loader(s[keep])
        keep &= s["loader"].to_numpy() == loader
        if _sorted(_rows(s[KEY], keep), KEY):  # a scanned run's batches are in key order
            return Batches(loader, int(keep.sum()), table=table, keep=keep)
    whole = run.batches
    b = _rows(whole, _usable(whole))  # ok_batches: each step copies only when it drops rows
    if b.empty:
        raise InputError(f"{name}: no batches in the trace: nothing to fit")
    loader = main_loader(b)
    b = _rows(b, b["loader"].to_numpy() == loader)
    if not _sorted(b, ["rank", "epoch", "batch_id"]):
        b = b.sort_values(["rank", "epoch", "batch_id"], ignore_index=True)
    else:
        b = b.reset_index(drop=True)
    return Batches(loader, len(b), frame=b, whole=whole)


__all__ = ["Batches", "RunTrace", "TableRun", "columns_of", "main_loader", "select"]
