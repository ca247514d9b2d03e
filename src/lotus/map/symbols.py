"""Naming native addresses without debuggers: a small reader of ELF symbol tables and unwind tables.

py-spy names a native frame only when the library exports the symbol; frames in stripped code
(e.g. libjpeg-turbo bundled by Pillow, glibc's memmove variants) come out as raw addresses. With
the workload's ``/proc/self/maps`` we turn such an address into a library offset and name it from
the library's ``.symtab`` / ``.dynsym``, or, when the function has no symbol at all, by the start of
the function found in ``.eh_frame_hdr`` as ``func@0x<start>`` (VTune's convention for unnamed
functions). Only 64-bit little-endian ELF is read; anything else yields no symbols.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_log = logging.getLogger("lotus.map")

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
PT_LOAD = 1


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


@dataclass
class ElfSymbols:
    """Function symbols and unwind-table function starts of one ELF file."""

    path: str
    starts: list[int] = field(default_factory=list)  # symbol start addresses, sorted
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    fde_starts: list[int] = field(default_factory=list)  # function starts from .eh_frame_hdr, sorted
    loads: list[tuple[int, int, int]] = field(default_factory=list)  # PT_LOAD (offset, vaddr, filesz)
    has_symtab: bool = False

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        for off, vaddr, size in self.loads:
            if off <= file_offset < off + size:
                return vaddr + file_offset - off
        return None

    def lookup(self, vaddr: int) -> tuple[str | None, int] | None:
        """``(name, start)`` of the function holding ``vaddr``: a symbol, else ``(None, fde_start)``."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        # Walk back over overlapping/aliased symbols (a few at most) for one that contains vaddr.
        j = i
        while j >= 0 and j > i - 8:
            if self.starts[j] <= vaddr < max(self.ends[j], self.starts[j] + 1):
                return self.names[j], self.starts[j]
            j -= 1
        k = bisect.bisect_right(self.fde_starts, vaddr) - 1
        if k >= 0:
            start = self.fde_starts[k]
            if i >= 0 and self.starts[i] == start:
                return self.names[i], start
            return None, start
        return None


def _read_elf(path: str) -> ElfSymbols:
    out = ElfSymbols(path)
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return out
    with mm:
        if len(mm) < _EHDR.size or mm[:4] != b"\x7fELF" or mm[4] != 2 or mm[5] != 1:
            return out
        eh = _EHDR.unpack_from(mm, 0)
        phoff, shoff, phnum, shnum, shstrndx = eh[5], eh[6], eh[10], eh[12], eh[13]
        for n in range(phnum):
            p = _PHDR.unpack_from(mm, phoff + n * _PHDR.size)
            if p[0] == PT_LOAD:
                out.loads.append((p[2], p[3], p[5]))
        if not shoff or shoff + shnum * _SHDR.size > len(mm):
            return out
        sections = [_SHDR.unpack_from(mm, shoff + n * _SHDR.size) for n in range(shnum)]
        shstr = sections[shstrndx] if shstrndx < shnum else None

        def sec_name(s) -> bytes:
            if shstr is None:
                return b""
            base = shstr[4] + s[0]
            return mm[base: mm.find(b"\0", base)]

        syms: dict[int, tuple[int, str, int]] = {}  # start -> (end, name, rank); lower rank wins
        for s in sections:
            if s[1] not in (SHT_SYMTAB, SHT_DYNSYM) or s[9] != _SYM.size:
                continue
            out.has_symtab |= s[1] == SHT_SYMTAB
            strtab = sections[s[6]]
            str_off = strtab[4]
            data = mm[s[4]: s[4] + s[5]]
            for st_name, st_info, _other, shndx, value, size in _SYM.iter_unpack(data):
                if (st_info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC) or shndx == 0 or value == 0:
                    continue
                base = str_off + st_name
                name = mm[base: mm.find(b"\0", base)].decode("utf-8", "replace")
                name = name.split("@", 1)[0]
                rank = (0 if (st_info >> 4) == 1 else 1, len(name))  # prefer GLOBAL, then shorter names
                old = syms.get(value)
                if old is None or rank < old[2] or (old[0] - value == 0 and size):
                    syms[value] = (value + size, name, rank)
        for start in sorted(syms):
            end, name, _ = syms[start]
            out.starts.append(start)
            out.ends.append(end)
            out.names.append(name)
        for s in sections:
            if sec_name(s) == b".eh_frame_hdr":
                out.fde_starts = _fde_starts(mm, s[4], s[3], s[5])
    return out


def _fde_starts(mm, offset: int, vaddr: int, size: int) -> list[int]:
    """Function start addresses of an ``.eh_frame_hdr`` binary-search table (the common encodings)."""
    if size < 12:
        return []
    _version, ptr_enc, count_enc, table_enc = mm[offset], mm[offset + 1], mm[offset + 2], mm[offset + 3]
    if ptr_enc & 0x0F not in (0x03, 0x0B) or count_enc != 0x03 or table_enc != 0x3B:
        return []  # only (pcrel|datarel) 4-byte pointers, udata4 count, datarel sdata4 table
    (count,) = struct.unpack_from("<I", mm, offset + 8)
    table = offset + 12
    if table + count * 8 > offset + size:
        return []
    starts = [vaddr + loc for loc, _ in struct.iter_unpack("<ii", mm[table: table + count * 8])]
    starts.sort()
    return starts


class Symbolizer:
    """Names absolute addresses of one process, given its ``/proc/<pid>/maps``."""

    def __init__(self, maps: list[Mapping]):
        self.maps = maps
        self._starts = [m.start for m in maps]
        self._elves: dict[str, ElfSymbols | None] = {}

    def elf(self, path: str) -> ElfSymbols | None:
        if path not in self._elves:
            try:
                self._elves[path] = _read_elf(path)
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
        if elf is None:
            return f"func@{address - m.start + m.offset:#x}", module
        vaddr = elf.vaddr_of_offset(address - m.start + m.offset)
        if vaddr is None:
            return f"func@{address - m.start + m.offset:#x}", module
        found = elf.lookup(vaddr)
        if found is None:
            return f"func@{vaddr:#x}", module
        name, start = found
        return (name if name else f"func@{start:#x}"), module

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
        res = subprocess.run([tool], input="\n".join(todo) + "\n", capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        _log.debug("c++filt failed: %s", exc)
        return out
    lines = res.stdout.splitlines()
    if len(lines) == len(todo):
        out.update(dict(zip(todo, lines)))
    return out


def read_maps_file(path: str | os.PathLike) -> list[Mapping]:
    return parse_maps(Path(path).read_text(encoding="utf-8", errors="replace"))
