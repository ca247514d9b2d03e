"""Runs ("configs") of a data directory, loaded as events and batches DataFrames.

A data directory is one run or a directory of runs (``b512_gpu4/``, ``b1024_gpu4/``...). Each run is
a *config* of the analysis, named by its path relative to the data directory and natural-sorted.
Unreadable runs are skipped with a one-line warning; the rest is analysed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lotus.errors import InputError

_log = logging.getLogger("lotus.analysis")


@dataclass
class Config:
    """One run: its name, directory, events and batches (DataFrames), and torch.profiler traces."""

    name: str
    path: Path
    events: object  # pandas.DataFrame (lotus.trace.load_events)
    batches: object  # pandas.DataFrame (lotus.trace.batches_from_events)
    kineto: list[Path] = field(default_factory=list)

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
    from lotus.trace.batches import batches_from_events

    name = name or events.attrs.get("run", "run")
    return Config(name=name, path=Path(path or events.attrs.get("path", ".")), events=events,
                  batches=batches_from_events(events))


def iter_configs(data_dir: str | os.PathLike) -> Iterator[Config]:
    """Configs under ``data_dir`` one at a time (only one run's DataFrames in memory at once).

    Raises :class:`InputError` for a missing directory or one without any trace file; a run that
    cannot be read is skipped with a warning.
    """
    from lotus.trace.discover import find_runs
    from lotus.trace.events import events_of_run

    runs = find_runs(data_dir)
    yielded = 0
    for run in runs:
        try:
            events = events_of_run(run)
        except InputError as exc:
            _log.warning("%s; run %s skipped", exc, run.name)
            continue
        cfg = config_from_events(events, name=run.name, path=run.path)
        cfg.kineto = list(run.kineto)
        yielded += 1
        yield cfg
    if not yielded:
        raise InputError("no readable run here or below", data_dir)


def load_configs(data_dir: str | os.PathLike) -> list[Config]:
    """All configs under ``data_dir`` (see :func:`iter_configs`)."""
    return list(iter_configs(data_dir))


def load_config(path: str | os.PathLike) -> Config:
    """Exactly one run (``path`` itself, or the only run below it)."""
    from lotus.trace.discover import find_run
    from lotus.trace.events import events_of_run

    run = find_run(path)
    cfg = config_from_events(events_of_run(run), name=run.name, path=run.path)
    cfg.kineto = list(run.kineto)
    return cfg
