"""The apps CSV of ``lotus submit`` (torchloader's ``dl_submit.conf.csv``) -> :class:`AppSpec` rows.

Every error is one line naming the file, the row (data rows count from 1, the header is line 1) and the
column, raised as :class:`AppsError` before anything starts. See docs/submit.md for the format.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lotus.errors import LotusError

# torchloader's columns: all required unless the CSV has a `command` column
TORCHLOADER_COLUMNS = ("arch", "depth", "batch", "workers", "output_folder", "port", "submit_interval", "cuda_device")
OPTIONAL_COLUMNS = ("command", "name", "steps", "cpus", "args", "timeout_s", "profile")
TRAINER_COLUMNS = ("arch", "depth", "batch")  # needed (non-empty) by a row that runs the example trainer
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class AppsError(LotusError):
    """Bad apps CSV: one line naming the row and the column (the CLI exits 2, nothing started)."""


@dataclass(frozen=True)
class AppSpec:
    """One row of the apps CSV, validated. ``None``: not given (the job's own setting)."""

    row: int  # data row, from 1
    line: int  # line of the file
    name: str
    output_folder: str
    arch: str | None = None
    depth: str | None = None
    batch: int | None = None
    workers: int | None = None
    workers_auto: bool = False
    port: int | None = None
    submit_interval_s: float = 0.0
    cuda_devices: tuple[int, ...] | None = None  # () hides every GPU ("none")
    command: tuple[str, ...] | None = None  # None: the bundled example trainer
    steps: int | None = None
    cpus: tuple[int, ...] | None = None
    args: tuple[str, ...] = field(default_factory=tuple)  # extra trainer arguments
    timeout_s: float | None = None
    profile: str | None = None  # a trace directory to size workers=auto from (no probe)
    source: str = ""  # the CSV file

    def where(self, column: str) -> str:
        """'apps.csv: row 2 (line 3), column 'batch'' (the start of an error message)."""
        return f"{self.source + ': ' if self.source else ''}row {self.row} (line {self.line}), column '{column}'"

    @property
    def model(self) -> str | None:
        """The torchvision model name (arch + depth, e.g. resnet + 18 -> resnet18)."""
        return None if self.arch is None else f"{self.arch}{self.depth or ''}"

    @property
    def ranks(self) -> int:
        """Processes of the app: one per CUDA device for the trainer (torchrun), else 1."""
        if self.command is None and self.cuda_devices and len(self.cuda_devices) > 1:
            return len(self.cuda_devices)
        return 1


def parse_devices(text: str) -> tuple[int, ...] | None:
    """'0', '0,1', '0 1' -> device numbers; '' -> None (not set); 'none' -> () (no GPU). ValueError if bad."""
    t = text.strip()
    if not t:
        return None
    if t.lower() in ("none", "cpu"):
        return ()
    if not re.fullmatch(r"\d+(\s*[, ]\s*\d+)*", t):
        raise ValueError(f"{text!r} is not a device list (e.g. 0 or 0,1)")
    devs = tuple(int(x) for x in re.split(r"[\s,]+", t))
    if len(set(devs)) != len(devs):
        raise ValueError(f"{text!r} names a device twice")
    return devs


class _Row:
    def __init__(self, path: str, row: int, line: int, values: dict[str, str]):
        self.path, self.row, self.line, self.values = path, row, line, values

    def fail(self, column: str, message: str) -> AppsError:
        return AppsError(f"{self.path}: row {self.row} (line {self.line}), column '{column}': {message}")

    def text(self, column: str) -> str:
        return (self.values.get(column) or "").strip()

    def integer(self, column: str, lo: int, hi: int | None = None) -> int | None:
        t = self.text(column)
        if not t:
            return None
        try:
            v = int(t)
        except ValueError:
            raise self.fail(column, f"{t!r} is not a whole number") from None
        if v < lo or (hi is not None and v > hi):
            raise self.fail(column, f"{v} is out of range ({lo}..{hi})" if hi is not None else f"{v} is below {lo}")
        return v

    def number(self, column: str, lo: float, allow_lo: bool = True) -> float | None:
        t = self.text(column)
        if not t:
            return None
        try:
            v = float(t)
        except ValueError:
            raise self.fail(column, f"{t!r} is not a number") from None
        if not math.isfinite(v) or v < lo or (not allow_lo and v == lo):
            raise self.fail(column, f"{t} must be {'>=' if allow_lo else '>'} {lo:g}")
        return v

    def split(self, column: str) -> tuple[str, ...] | None:
        t = self.text(column)
        if not t:
            return None
        try:
            return tuple(shlex.split(t))
        except ValueError as exc:
            raise self.fail(column, f"cannot split {t!r} ({exc})") from None


def _header(path: str, header: list[str]) -> list[str]:
    cols = [h.strip() for h in header]
    known = set(TORCHLOADER_COLUMNS) | set(OPTIONAL_COLUMNS)
    for c in cols:
        if c not in known:
            raise AppsError(f"{path}: line 1 (header): unknown column '{c}' (known: {', '.join(sorted(known))})")
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise AppsError(f"{path}: line 1 (header): column '{dup[0]}' given twice")
    if "command" not in cols:
        missing = [c for c in TORCHLOADER_COLUMNS if c not in cols]
        if missing:
            raise AppsError(f"{path}: line 1 (header): missing column '{missing[0]}' (needed: "
                            f"{', '.join(TORCHLOADER_COLUMNS)}; or a 'command' column)")
    return cols


def _app(r: _Row) -> AppSpec:
    command = r.split("command")
    if command is not None:
        from lotus.launch.runner import CommandNotFound, resolve_command

        try:
            resolve_command(list(command))
        except CommandNotFound as exc:
            raise r.fail("command", str(exc)) from None
    else:
        for c in TRAINER_COLUMNS:
            if not r.text(c):
                raise r.fail(c, "empty (a row without a command runs the example trainer: arch, depth, batch needed)")
    arch, depth = r.text("arch") or None, r.text("depth") or None
    if arch is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", arch):
        raise r.fail("arch", f"{arch!r} is not a model family name (e.g. resnet)")
    if depth is not None and not re.fullmatch(r"[A-Za-z0-9_]+", depth):
        raise r.fail("depth", f"{depth!r} is not a depth (e.g. 18)")
    wtext = r.text("workers").lower()
    auto = wtext == "auto"
    if not auto and wtext and not wtext.isdigit():
        raise r.fail("workers", f"{r.text('workers')!r} is not a whole number nor 'auto'")
    workers = None if auto else r.integer("workers", 0)
    try:
        devices = parse_devices(r.text("cuda_device"))
    except ValueError as exc:
        raise r.fail("cuda_device", str(exc)) from None
    cpus = None
    if r.text("cpus"):
        from lotus.launch.options import parse_cpus

        try:
            cpus = tuple(parse_cpus(r.text("cpus")))
        except ValueError as exc:
            raise r.fail("cpus", str(exc)) from None
    profile = r.text("profile") or None
    if profile is not None and not Path(profile).exists():
        raise r.fail("profile", f"{profile}: no such trace directory")
    args = r.split("args") or ()
    if args and command is not None:
        raise r.fail("args", "trainer arguments on a row with a command (put them in the command)")
    name = r.text("name")
    if name and not _NAME.fullmatch(name):
        raise r.fail("name", f"{name!r}: use letters, digits, '.', '_' and '-' only")
    return AppSpec(row=r.row, line=r.line, source=r.path, name=name, output_folder=r.text("output_folder"),
                   arch=arch, depth=depth,
                   batch=r.integer("batch", 1), workers=workers, workers_auto=auto, port=r.integer("port", 1, 65535),
                   submit_interval_s=r.number("submit_interval", 0.0) or 0.0, cuda_devices=devices,
                   command=command, steps=r.integer("steps", 1), cpus=cpus, args=args,
                   timeout_s=r.number("timeout_s", 0.0, allow_lo=False), profile=profile)


def check_models(apps: list[AppSpec]) -> None:
    """Every trainer row names a torchvision model (imports torchvision only when such a row exists)."""
    rows = [a for a in apps if a.command is None]
    if not rows:
        return
    from torchvision import models

    names = set(models.list_models()) if hasattr(models, "list_models") else None
    for a in rows:
        ok = str(a.model) in names if names is not None else callable(getattr(models, str(a.model), None))
        if not ok:
            where = a.where("arch").replace("column 'arch'", "columns 'arch'+'depth'")
            raise AppsError(f"{where}: {a.model!r} is not a torchvision model (e.g. resnet + 18)")


def _default_name(app: AppSpec) -> str:
    if app.command is not None:
        from lotus.launch.options import script_name

        base = script_name(list(app.command))
    else:
        base = f"{app.model}-b{app.batch}"
    w = "auto" if app.workers_auto else ("" if app.workers is None else str(app.workers))
    return f"{base}-w{w}" if w else base


def _names(path: str, apps: list[AppSpec]) -> list[AppSpec]:
    """Fill in default names (unique in the CSV) and reject duplicate given names."""
    from dataclasses import replace

    seen: dict[str, int] = {}
    for a in apps:
        if a.name:
            if a.name in seen:
                raise AppsError(f"{a.where('name')}: {a.name!r} is row "
                                f"{seen[a.name]}'s name too")
            seen[a.name] = a.row
    out = []
    for a in apps:
        if not a.name:
            base, name, n = _default_name(a), _default_name(a), 1
            while name in seen:
                n += 1
                name = f"{base}-{n}"
            seen[name] = a.row
            a = replace(a, name=name)
        out.append(a)
    return out


def read_apps(path: str | os.PathLike) -> list[AppSpec]:
    """Parse and validate the apps CSV. Raises :class:`AppsError` (one line, row and column named)."""
    p = os.fspath(path)
    try:
        with open(p, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, skipinitialspace=True)
            rows = [(reader.line_num, rec) for rec in reader]
    except OSError as exc:
        raise AppsError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AppsError(f"{p}: not a CSV file ({exc})") from None
    rows = [(ln, rec) for ln, rec in rows if any(c.strip() for c in rec) and not rec[0].lstrip().startswith("#")]
    if not rows:
        raise AppsError(f"{p}: empty (expected a header line: {','.join(TORCHLOADER_COLUMNS)})")
    cols = _header(p, rows[0][1])
    apps = []
    for i, (line, rec) in enumerate(rows[1:], start=1):
        if len(rec) > len(cols) and any(c.strip() for c in rec[len(cols):]):
            raise AppsError(f"{p}: row {i} (line {line}): {len(rec)} values for {len(cols)} columns")
        apps.append(_app(_Row(p, i, line, dict(zip(cols, rec, strict=False)))))
    if not apps:
        raise AppsError(f"{p}: no app (only a header)")
    return _names(p, apps)
