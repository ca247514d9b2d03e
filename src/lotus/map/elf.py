"""A small reader of 64-bit little-endian ELF files: function symbols, unwind-table bounds, PT_LOADs.

Symbols come from ``.symtab``/``.dynsym``, or from the file's separate debug file found by GNU
build-id (``/usr/lib/debug/.build-id/xx/yyyy.debug``, as installed by ``*-dbg``/``*-dbgsym``/
``debuginfo`` packages; other roots in ``$LOTUS_DEBUG_DIRS``). Function bounds without a symbol come
from ``.eh_frame_hdr``, or, in code without unwind info (hand-written assembly), from the nearest
``push %rbp`` prologue. Anything that is not 64-bit little-endian ELF yields no symbols.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
PT_LOAD = 1


@dataclass
class ElfSymbols:
    """Function symbols and unwind-table function starts of one ELF file."""

    path: str
    starts: list[int] = field(default_factory=list)  # symbol start addresses, sorted
    ends: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    fde_starts: list[int] = field(default_factory=list)  # function starts from .eh_frame_hdr, sorted
    fde_ends: list[int] = field(default_factory=list)  # their ends (start + range), 0 when unknown
    text: tuple[int, int] = (0, 0)  # vaddr range of .text
    loads: list[tuple[int, int, int]] = field(default_factory=list)  # PT_LOAD (offset, vaddr, filesz)
    has_symtab: bool = False
    sized_ends: list[int] = field(default_factory=list)  # ends, size-0 symbols extended to the next one
    debug_file: str | None = None  # separate debug file the symbols came from
    plt: list[tuple[int, int]] = field(default_factory=list)  # .plt/.plt.sec/.plt.got ranges (call stubs)

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        for off, vaddr, size in self.loads:
            if off <= file_offset < off + size:
                return vaddr + file_offset - off
        return None

    def offset_of(self, vaddr: int) -> int | None:
        for off, v, size in self.loads:
            if v <= vaddr < v + size:
                return off + vaddr - v
        return None

    def lookup(self, vaddr: int) -> tuple[str | None, int, int] | None:
        """``(name, start, end)`` of the function holding ``vaddr``; name None when it has no symbol.

        Tried in order: a symbol whose range holds ``vaddr``; a function of the unwind table; else, in
        code without unwind info (hand-written assembly), the nearest function prologue before it.
        """
        i = bisect.bisect_right(self.starts, vaddr) - 1
        j = i
        while j >= 0 and j > i - 8:  # aliases and nested symbols: a few steps back at most
            if self.starts[j] <= vaddr < self.ends[j]:
                return self.names[j], self.starts[j], self.ends[j]
            j -= 1
        for lo, hi in self.plt:
            if lo <= vaddr < hi:
                return "[PLT stub]", lo, hi
        k = bisect.bisect_right(self.fde_starts, vaddr) - 1
        if k >= 0 and (self.fde_ends[k] == 0 or vaddr < self.fde_ends[k]):
            start = self.fde_starts[k]
            end = self.fde_ends[k] or (self.fde_starts[k + 1] if k + 1 < len(self.fde_starts) else vaddr + 1)
            if i >= 0 and self.starts[i] == start:
                return self.names[i], start, end
            return None, start, end
        if not self.text[0] <= vaddr < self.text[1]:
            return None
        lo = max(self.fde_ends[k] if k >= 0 else 0, self.ends[i] if i >= 0 else 0, self.text[0])
        hi = min(self.fde_starts[k + 1] if k + 1 < len(self.fde_starts) else self.text[1],
                 self.starts[i + 1] if i + 1 < len(self.starts) else self.text[1])
        start, end = self._prologue_bounds(vaddr, lo, hi)
        if i >= 0 and self.starts[i] == start:
            return self.names[i], start, end
        return None, start, end

    def _prologue_bounds(self, vaddr: int, lo: int, hi: int) -> tuple[int, int]:
        """Function bounds in ``[lo, hi)`` by ``push %rbp`` at 16-byte boundaries after ``ret``/padding."""
        lo_scan = max(lo, vaddr - (1 << 16))
        hi_scan = min(hi, vaddr + (1 << 16))
        off = self.offset_of(lo_scan)
        if off is None:
            return lo, hi
        with open(self.path, "rb") as fh:
            fh.seek(off)
            data = fh.read(hi_scan - lo_scan)

        def is_start(a: int) -> bool:
            rel = a - lo_scan
            if rel <= 0 or rel >= len(data):
                return a == lo
            return data[rel] == 0x55 and data[rel - 1] in (0xC3, 0x90, 0xCC, 0x00)

        a = vaddr & ~15
        while a > lo_scan and not is_start(a):
            a -= 16
        start = max(a, lo)
        b = (vaddr + 16) & ~15
        while b < hi_scan and not is_start(b):
            b += 16
        return start, min(b, hi)


def debug_dirs() -> list[str]:
    """Where separate debug files live: ``$LOTUS_DEBUG_DIRS`` (``os.pathsep``-separated) or /usr/lib/debug."""
    env = os.environ.get("LOTUS_DEBUG_DIRS")
    return [d for d in env.split(os.pathsep) if d] if env else ["/usr/lib/debug"]


def _sections(mm) -> tuple[tuple, list, dict[bytes, tuple]] | None:
    if len(mm) < _EHDR.size or mm[:4] != b"\x7fELF" or mm[4] != 2 or mm[5] != 1:
        return None
    eh = _EHDR.unpack_from(mm, 0)
    shoff, shnum, shstrndx = eh[6], eh[12], eh[13]
    if not shoff or shoff + shnum * _SHDR.size > len(mm):
        return eh, [], {}
    sections = [_SHDR.unpack_from(mm, shoff + n * _SHDR.size) for n in range(shnum)]
    by_name: dict[bytes, tuple] = {}
    if shstrndx < shnum:
        base0 = sections[shstrndx][4]
        for sec in sections:
            base = base0 + sec[0]
            by_name.setdefault(mm[base: mm.find(b"\0", base)], sec)
    return eh, sections, by_name


def _function_symbols(mm, sections: list, syms: dict[int, tuple[int, str, tuple]]) -> bool:
    """Add FUNC symbols of ``.symtab``/``.dynsym`` to ``syms`` (start -> (end, name, rank)); True if a .symtab."""
    has_symtab = False
    for sec in sections:
        if sec[1] not in (SHT_SYMTAB, SHT_DYNSYM) or sec[9] != _SYM.size or sec[6] >= len(sections):
            continue
        has_symtab |= sec[1] == SHT_SYMTAB
        str_off = sections[sec[6]][4]
        for st_name, st_info, _other, shndx, value, size in _SYM.iter_unpack(mm[sec[4]: sec[4] + sec[5]]):
            if (st_info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC) or shndx == 0 or value == 0:
                continue
            base = str_off + st_name
            name = mm[base: mm.find(b"\0", base)].decode("utf-8", "replace").split("@", 1)[0]
            rank = (0 if (st_info >> 4) == 1 else 1, len(name))  # prefer GLOBAL, then shorter names
            old = syms.get(value)
            if old is None or rank < old[2] or (old[0] == value and size):
                syms[value] = (value + size, name, rank)
    return has_symtab


def _build_id(mm, by_name: dict[bytes, tuple]) -> str | None:
    sec = by_name.get(b".note.gnu.build-id")
    if sec is None or sec[5] < 16:
        return None
    namesz, descsz, _type = struct.unpack_from("<III", mm, sec[4])
    desc = sec[4] + 12 + ((namesz + 3) & ~3)
    return mm[desc: desc + descsz].hex() or None


def _debug_file(build_id: str | None) -> str | None:
    if not build_id or len(build_id) < 3:
        return None
    for d in debug_dirs():
        cand = Path(d) / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        if cand.exists():
            return str(cand)
    return None


def read_elf(path: str) -> ElfSymbols:
    """Symbols (from the file, or its separate debug file found by build-id), unwind table, PT_LOADs."""
    out = ElfSymbols(path)
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return out
    with mm:
        parsed = _sections(mm)
        if parsed is None:
            return out
        eh, sections, by_name = parsed
        phoff, phnum = eh[5], eh[10]
        for n in range(phnum):
            p = _PHDR.unpack_from(mm, phoff + n * _PHDR.size)
            if p[0] == PT_LOAD:
                out.loads.append((p[2], p[3], p[5]))
        syms: dict[int, tuple[int, str, tuple]] = {}
        out.has_symtab = _function_symbols(mm, sections, syms)
        if not out.has_symtab:
            debug = _debug_file(_build_id(mm, by_name))
            if debug is not None:
                with open(debug, "rb") as dfh, mmap.mmap(dfh.fileno(), 0, access=mmap.ACCESS_READ) as dmm:
                    dparsed = _sections(dmm)
                    if dparsed is not None:
                        out.has_symtab = _function_symbols(dmm, dparsed[1], syms)
                        out.debug_file = debug
        for start in sorted(syms):
            end, name, _ = syms[start]
            out.starts.append(start)
            out.ends.append(end)
            out.names.append(name)
        out.sized_ends = list(out.ends)
        for n in range(len(out.starts)):  # size-0 symbols (assembly) run to the next symbol
            if out.ends[n] <= out.starts[n]:
                out.sized_ends[n] = out.starts[n + 1] if n + 1 < len(out.starts) else out.starts[n] + 1
        hdr = by_name.get(b".eh_frame_hdr")
        if hdr is not None:
            fdes = _fdes(mm, hdr[4], hdr[3], hdr[5], out)
            out.fde_starts = [a for a, _ in fdes]
            out.fde_ends = [b for _, b in fdes]
        text = by_name.get(b".text")
        if text is not None:
            out.text = (text[3], text[3] + text[5])
        out.plt = [(sec[3], sec[3] + sec[5]) for n, sec in by_name.items() if n in (b".plt", b".plt.sec", b".plt.got")]
    return out


def _fdes(mm, offset: int, vaddr: int, size: int, elf: ElfSymbols) -> list[tuple[int, int]]:
    """``(start, end)`` of the functions in an ``.eh_frame_hdr`` table (end 0 when unknown), sorted.

    Reads the common encodings only: 4-byte pointers, a datarel sdata4 table, and FDEs whose
    pc_begin is pcrel sdata4 (what GCC and clang emit); anything else gives no or open-ended ranges.
    """
    if size < 12:
        return []
    _version, ptr_enc, count_enc, table_enc = mm[offset], mm[offset + 1], mm[offset + 2], mm[offset + 3]
    if ptr_enc & 0x0F not in (0x03, 0x0B) or count_enc != 0x03 or table_enc != 0x3B:
        return []
    (count,) = struct.unpack_from("<I", mm, offset + 8)
    table = offset + 12
    if table + count * 8 > offset + size:
        return []
    out = []
    for loc, fde in struct.iter_unpack("<ii", mm[table: table + count * 8]):
        start, fde_v = vaddr + loc, vaddr + fde
        end = 0
        fo = elf.offset_of(fde_v)
        if fo is not None and fo + 16 <= len(mm):
            length, _cie, begin, span = struct.unpack_from("<IIiI", mm, fo)
            if length != 0xFFFFFFFF and fde_v + 8 + begin == start:
                end = start + span
        out.append((start, end))
    out.sort()
    return out
