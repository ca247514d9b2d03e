"""Runs ("configs") of a data directory, loaded as events and batches DataFrames.

A data directory is one run or a directory of runs (``b512_gpu4/``, ``b1024_gpu4/``...). Each run is
a *config* of the analysis, named by its path relative to the data directory and natural-sorted.
Unreadable runs are skipped with a one-line warning; the rest is analysed.

Engines (``engine=``): ``"memory"`` reads every event into one DataFrame (:func:`lotus.trace.load_events`);
``"scan"`` reads the files in chunks, folds the batch-level events into compact per-batch columns and
keeps the few other events that are not per-sample detail, with per-op aggregates beside them
(:mod:`lotus.query.scan`: memory bounded by the batches, quantiles of ops approximate within 0.04%);
``"auto"`` (what stats, verdict, wait and throughput use) scans runs whose
lotus trace files hold more than :data:`SCAN_THRESHOLD_BYTES` (``$LOTUS_SCAN_BYTES``; compressed files
count 5 times their size) and reads smaller
ones, and original LotusTrace logs, in memory. ``$LOTUS_ENGINE`` (memory | scan | auto) overrides ``auto``
(commands that need every event ask for ``memory`` and always get it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lotus.errors import InputError

_log = logging.getLogger("lotus.analysis")
SCAN_THRESHOLD_BYTES = 64 << 20  # ~1.4M events: below, exact quantiles in as little time (docs/analysis.md)
ZST_RATIO = 5
ENGINES = ("memory", "scan", "auto")


def _engine_for(run, engine: str) -> str:
    if engine == "memory":  # a command that needs every event
        return "memory"
    engine = os.environ.get("LOTUS_ENGINE", engine)
    if engine not in ENGINES:
        raise InputError(f"LOTUS_ENGINE must be one of {', '.join(ENGINES)}, not {engine!r}", ".")
    if engine == "memory" or run.original or not run.native:
        return "memory"
    if engine == "scan":
        return "scan"
    limit = int(os.environ.get("LOTUS_SCAN_BYTES", SCAN_THRESHOLD_BYTES))
    total = 0
    for p in run.native:
        try:  # compressed parts count at the ~5x they hold (48 -> ~10 bytes per record)
            total += p.stat().st_size * (ZST_RATIO if p.name.endswith(".zst") else 1)
        except OSError:
            pass
    return "scan" if total > limit else "memory"


def _config_of(run, engine: str, summary_only: bool = False, op_stats: bool = True, census: bool = False,
               op_reduce: str = "") -> Config:
    from lotus.trace.events import events_of_run

    if _engine_for(run, engine) == "scan":
        cfg = scanned_config(run, summary_only, op_stats, census, op_reduce)
    else:
        cfg = config_from_events(events_of_run(run), name=run.name, path=run.path)
    cfg.kineto = list(run.kineto)
    return cfg


def scanned_config(run, summary_only: bool = False, op_stats: bool = True, census: bool = False,
                   op_reduce: str = "") -> Config:
    """The :class:`Config` of ``run`` by the scan (:func:`lotus.query.scan_run`; options: :func:`iter_configs`'s)."""
    from lotus.query import SUMMARY_COLUMNS, batches_of_scan, scan_run

    events = scan_run(run, columns=SUMMARY_COLUMNS if summary_only else None, op_stats=op_stats, census=census,
                      op_reduce=op_reduce)
    table = getattr(events.attrs["op_engine"], "batch_table", None)
    if table is None:
        return Config(name=run.name, path=run.path, events=events, batches=batches_of_scan(events))
    cfg = Config(name=run.name, path=run.path, events=events, batches=None, table=table)  # batches: on first use
    if table.partial:  # the summaries' columns only: cfg.batches scans the run again, every column kept
        cfg.rescan = lambda: batches_of_scan(scan_run(run))
    return cfg


class _Batches:
    """``Config.batches``: the DataFrame given, or made from ``Config.table`` on first use."""

    def __get__(self, cfg, owner=None):
        if cfg is None:
            return None  # the dataclass field's default
        if cfg.__dict__.get("_batches") is None and cfg.__dict__.get("table") is not None:
            cfg.__dict__["_batches"] = cfg.rescan() if cfg.table.partial else cfg.table.frame()
        return cfg.__dict__.get("_batches")

    def __set__(self, cfg, value):
        cfg.__dict__["_batches"] = value


@dataclass
class Config:
    """One run: its name, directory, events and batches (DataFrames), and torch.profiler traces.

    A scanned run (:mod:`lotus.query.scan`) also has ``table``, its batches as compact columns
    (:class:`lotus.query.batchtable.BatchTable`): ``batches`` is made from it on first use, and the
    summaries of ``lotus analyze stats|wait|verdict`` read :attr:`summary_batches` (the table when
    there is one), which needs no DataFrame."""

    name: str
    path: Path
    events: object  # pandas.DataFrame (lotus.trace.load_events)
    batches: object = _Batches()  # pandas.DataFrame (lotus.query.batches_from_events)
    kineto: list[Path] = field(default_factory=list)
    table: object = None  # lotus.query.batchtable.BatchTable of a scanned run, or None
    rescan: object = None  # where ``table`` is partial: () -> the batches DataFrame (another scan)

    @property
    def summary_batches(self):
        """What :func:`lotus.analysis.stats.config_stats`, :func:`lotus.analysis.wait.wait_stats` and
        :func:`lotus.analysis.diagnosis.verdict` read: the compact table of a scanned run, else ``batches``."""
        return self.table if self.table is not None else self.batches

    def batches_of(self, columns: list[str]):
        """The batches DataFrame with only ``columns``: a scanned run's made from its table without the
        others (``BatchTable.frame``), else the columns of ``batches``."""
        if self.table is not None and not self.table.partial and self.__dict__.get("_batches") is None:
            return self.table.frame(columns)
        return self.batches[columns]

    def batches_by_rank(self, columns: list[str]):
        """:meth:`batches_of` in parts of whole ranks (rank order; each part's rows in the order of the whole),
        an iterator of parts, each an iterator of DataFrames: pieces of its rows in order (indexed from 0),
        to be read in turn: a scanned run's made from its table a piece at a time
        (:func:`lotus.query.rank_pieces`: one piece's DataFrame in memory at once, never a rank's);
        where the table is small or there is none, the DataFrame of :meth:`batches_of` itself."""
        from lotus.query import rank_parts

        t = self.table
        if t is not None and not t.partial and self.__dict__.get("_batches") is None and rank_parts(t) is not None:
            return self._rank_parts(t, columns)
        return self.batches_of(columns)

    @staticmethod
    def _rank_parts(table, columns: list[str]):
        from lotus.query import rank_pieces

        for _ranks, pieces in rank_pieces(table, columns):
            yield pieces
            del pieces

    @property
    def files(self) -> list[dict]:
        return list(self.events.attrs.get("files", []))

    @property
    def loaders(self) -> dict[tuple[int, int], dict]:
        """DataLoader descriptions by (rank, loader id), from the main files."""
        out: dict[tuple[int, int], dict] = {}
        for f in self.files:
            for key, desc in (f.get("loaders") or {}).items():
                out[(int(f.get("rank", 0)), int(key))] = desc
        return out

    @property
    def formats(self) -> set[str]:
        return {f.get("format", "lotus") for f in self.files}


def config_from_events(events, name: str | None = None, path: str | os.PathLike | None = None) -> Config:
    """A :class:`Config` from an events DataFrame (batches derived from it)."""
    from lotus.query import batches_from_events

    name = name or events.attrs.get("run", "run")
    return Config(name=name, path=Path(path or events.attrs.get("path", ".")), events=events,
                  batches=batches_from_events(events))


def iter_configs(data_dir: str | os.PathLike, *, engine: str = "memory", summary_only: bool = False,
                 census: bool = False, op_reduce: str = "") -> Iterator[Config]:
    """Configs under ``data_dir`` one at a time (only one run's DataFrames in memory at once).
    ``engine``: see the module doc (a scanned run's ``events`` holds no per-sample events).
    ``summary_only``: a scanned run's table keeps only what ``lotus analyze stats|wait|verdict``
    read (``cfg.batches`` then costs another scan). ``census``: a scanned run also counts every record
    (``events.attrs["op_engine"].census``, for ``lotus info``). ``op_reduce``: what a scanned run also keeps
    of its op records for ``lotus report`` and ``lotus plot`` (:func:`lotus.query.scan.scan_run`).

    Raises :class:`InputError` for a missing directory or one without any trace file; a run that
    cannot be read is skipped with a warning.
    """
    return iter_runs(data_dir, lambda run: _config_of(run, engine, summary_only, census=census, op_reduce=op_reduce))


def iter_runs(data_dir: str | os.PathLike, make) -> Iterator:
    """``make(run)`` of each run under ``data_dir`` (:func:`lotus.trace.discover.find_runs`), one at a time, as
    :func:`iter_configs` (a run whose ``make`` raises :class:`InputError` skipped with a warning; none left: an
    :class:`InputError`)."""
    from lotus.trace.discover import find_runs
    from lotus.trace.native import header_cache

    with header_cache():  # which runs, then each run's scan: the headers read once
        runs = find_runs(data_dir)
        yielded = 0
        for run in runs:
            try:
                got = make(run)
            except InputError as exc:
                _log.warning("%s; run %s skipped", exc, run.name)
                continue
            yielded += 1
            yield got
    if not yielded:
        raise InputError("no readable run here or below", data_dir)


def load_configs(data_dir: str | os.PathLike, *, engine: str = "memory", op_reduce: str = "") -> list[Config]:
    """All configs under ``data_dir`` (see :func:`iter_configs`)."""
    return list(iter_configs(data_dir, engine=engine, op_reduce=op_reduce))


def load_config(path: str | os.PathLike, *, engine: str = "memory", summary_only: bool = False,
                op_stats: bool = True, census: bool = False) -> Config:
    """Exactly one run (``path`` itself, or the only run below it); ``summary_only``: see :func:`iter_configs`;
    ``op_stats=False``: a scanned run keeps no per-op statistics (:func:`lotus.query.scan.scan_run`);
    ``census``: see :func:`iter_configs`."""
    from lotus.trace.discover import find_run
    from lotus.trace.native import header_cache

    with header_cache():
        return _config_of(find_run(path), engine, summary_only, op_stats, census)
