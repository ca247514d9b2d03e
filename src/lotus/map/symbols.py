"""Naming native addresses of a process without debuggers, from its ``/proc/<pid>/maps``.

py-spy names a native frame only when the library exports the symbol; frames in stripped code
(e.g. libjpeg-turbo bundled by Pillow) come out as raw addresses. With the workload's maps we turn
such an address into a library address and name it with :mod:`lotus.map.elf` (symbols, separate
debug files), else ``func@0x<start>`` (VTune's convention for unnamed functions), else, optionally,
after a similar function of another build (:mod:`lotus.map.donors`).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lotus.map.elf import ElfSymbols, read_elf

_log = logging.getLogger("lotus.map")


@dataclass
class Mapping:
    """One line of ``/proc/<pid>/maps`` backed by a file."""

    start: int
    end: int
    offset: int
    path: str


def parse_maps(text: str) -> list[Mapping]:
    """File-backed mappings of a ``/proc/<pid>/maps`` dump, sorted by start address."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        try:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            off = int(parts[2], 16)
        except ValueError:
            continue
        path = parts[5].strip()
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out.append(Mapping(lo, hi, off, path))
    out.sort(key=lambda m: m.start)
    return out


class Symbolizer:
    """Names absolute addresses of one process, given its ``/proc/<pid>/maps``.

    With ``donors`` (a :class:`lotus.map.donors.Donors`), functions of stripped libraries that have
    no symbol are named after the most similar function of another build of the same library that
    has symbols (see :mod:`lotus.map.donors`); ``matched`` records each such naming.
    """

    def __init__(self, maps: list[Mapping], donors=None):
        self.maps = maps
        self._starts = [m.start for m in maps]
        self._elves: dict[str, ElfSymbols | None] = {}
        self.donors = donors
        self.matched: dict[str, dict] = {}
        self._named: dict[tuple[str, int], str | None] = {}

    def elf(self, path: str) -> ElfSymbols | None:
        if path not in self._elves:
            try:
                self._elves[path] = read_elf(path)
            except OSError as exc:
                _log.debug("cannot read %s: %s", path, exc)
                self._elves[path] = None
        return self._elves[path]

    def mapping_of(self, address: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and self.maps[i].start <= address < self.maps[i].end:
            return self.maps[i]
        return None

    def resolve(self, address: int) -> tuple[str, str] | None:
        """``(function, module file name)`` for an absolute address, or None outside any file."""
        m = self.mapping_of(address)
        if m is None:
            return None
        module = os.path.basename(m.path)
        elf = self.elf(m.path)
        vaddr = elf.vaddr_of_offset(address - m.start + m.offset) if elf is not None else None
        if vaddr is None:
            return f"func@{address - m.start + m.offset:#x}", module
        found = elf.lookup(vaddr)
        if found is None:
            return f"func@{vaddr:#x}", module
        name, start, end = found
        if name:
            return name, module
        return self._donor_name(m.path, elf, start, end) or f"func@{start:#x}", module

    def _donor_name(self, path: str, elf: ElfSymbols, start: int, end: int) -> str | None:
        if self.donors is None or elf.has_symtab:
            return None
        key = (path, start)
        if key not in self._named:
            found = self.donors.name(path, elf, start, end, mapped=[mp.path for mp in self.maps])
            self._named[key] = None
            if found is not None:
                name, info = found
                self._named[key] = name
                self.matched[f"{name}|{os.path.basename(path)}"] = {"address": f"{start:#x}", **info}
        return self._named[key]

    def module_paths(self) -> dict[str, str]:
        """Module file name -> path of the mapped files."""
        return {os.path.basename(m.path): m.path for m in self.maps}


def demangle(names: list[str]) -> dict[str, str]:
    """C++ names demangled with ``c++filt`` when it is installed; others map to themselves."""
    todo = sorted({n for n in names if n.startswith("_Z")})
    out = {n: n for n in names}
    tool = shutil.which("c++filt")
    if not todo or tool is None:
        return out
    try:
        res = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True, text=True, timeout=60,
                             check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        _log.debug("c++filt failed: %s", exc)
        return out
    lines = res.stdout.splitlines()
    if len(lines) == len(todo):
        out.update(dict(zip(todo, lines, strict=True)))
    return out


def read_maps_file(path: str | os.PathLike) -> list[Mapping]:
    return parse_maps(Path(path).read_text(encoding="utf-8", errors="replace"))
