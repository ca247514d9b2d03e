"""Errors meant for people: one line naming the file (and line) at fault."""

from __future__ import annotations

import os


class LotusError(Exception):
    """Base class of the errors lotus reports as a one-line message (exit code 1 in the CLI)."""


class ClusterError(LotusError):
    """The cluster named by ``--cluster`` / ``$LOTUS_CLUSTER`` cannot be used (exit code 2 in the CLI)."""

    exit_code = 2


class InputError(LotusError):
    """Bad or missing input data: names the file and, where known, the line."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None):
        self.message = message
        self.path = None if path is None else os.fspath(path)
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        return f"{where}{self.message}"


class NoTraceError(InputError):
    """A directory holds no trace files lotus can read."""
