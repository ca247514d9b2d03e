"""Names for functions of stripped libraries, borrowed from another build of the same library.

Wheels often bundle stripped libraries: Pillow's ``libjpeg-<hash>.so`` has no symbol for its hot
internal functions (``decode_mcu``, the AVX2 IDCT...), so samples in them can only be called
``func@0x<start>``. Another build of the same library with a symbol table is often at hand (for
libjpeg-turbo, torchvision bundles one). A function is given a donor's name when its code is
clearly most similar to that donor function:

* candidates: donor functions whose size is within -20%/+25% of the function's;
* similarity: Jaccard index of the sets of 4-byte substrings of the two functions' code;
* accepted when the best candidate scores >= 0.5 and 1.25x the best candidate *of another name*,
  or, for functions of 64 bytes or more, >= 0.1 and 2x it (identical hand-written assembly scores
  ~0.7-1.0; recompiled C ~0.15-0.6; unrelated code < 0.05); or when the code is the same (>= 0.99)
  and no function of another name is as close (instances of one assembly macro differ in a few bytes).

Every borrowed name is recorded (donor file, score, runner-up) in the mapping's ``lotus.matched_names``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from pathlib import Path

from lotus.map.elf import ElfSymbols, read_elf

_log = logging.getLogger("lotus.map")
MAX_FUNCTION_BYTES = 1 << 16


def library_stem(path: str) -> str:
    """``libjpeg-6dc8d115.so.62.4.0`` -> ``libjpeg``; ``libjpeg.67fb65bd.so.8`` -> ``libjpeg``."""
    return re.split(r"[-.]", os.path.basename(path), maxsplit=1)[0].lower()


def _shingles(data: bytes, k: int = 4) -> set[bytes]:
    return {data[i: i + k] for i in range(len(data) - k + 1)}


class Donors:
    """Libraries with symbols that can lend names; ``extra`` are files named by the user."""

    def __init__(self, extra: list[str] | None = None, search: bool = True):
        self.extra = [str(Path(p).resolve()) for p in (extra or [])]
        self.search = search
        self._elves: dict[str, ElfSymbols | None] = {}
        self._code: dict[str, bytes] = {}
        self._shingles: dict[tuple[str, int], set[bytes]] = {}

    def _elf(self, path: str) -> ElfSymbols | None:
        if path not in self._elves:
            try:
                elf = read_elf(path)
                self._elves[path] = elf if elf.has_symtab and elf.starts else None
            except OSError:
                self._elves[path] = None
        return self._elves[path]

    def candidates(self, target: str, mapped: list[str] | None = None) -> list[str]:
        """Donor files for ``target``: user-given ones, then same-stem libraries mapped or nearby."""
        stem = library_stem(target)
        real = os.path.realpath(target)
        found: list[str] = list(self.extra)
        if self.search:
            pool = list(mapped or [])
            site = Path(target).resolve().parent.parent
            for pattern in (f"*/{stem}*.so*", f"*/lib/{stem}*.so*"):
                pool.extend(glob.glob(str(site / pattern)))
            for p in pool:
                if library_stem(p) == stem and os.path.realpath(p) != real and p not in found:
                    found.append(p)
        return [p for p in found if self._elf(p) is not None]

    def _function_code(self, path: str, elf: ElfSymbols, start: int, end: int) -> bytes:
        off = elf.offset_of(start)
        if off is None or end <= start:
            return b""
        with open(path, "rb") as fh:
            fh.seek(off)
            return fh.read(min(end - start, MAX_FUNCTION_BYTES))

    def name(self, target: str, elf: ElfSymbols, start: int, end: int, mapped: list[str] | None = None):
        """``(name, info)`` for the function ``[start, end)`` of ``target``, or None."""
        code = self._function_code(target, elf, start, end)
        if len(code) < 8:
            return None
        size = len(code)
        mine = _shingles(code)
        scored: list[tuple[float, str, str]] = []
        for donor in self.candidates(target, mapped):
            d = self._elf(donor)
            for i, (s, e, n) in enumerate(zip(d.starts, d.sized_ends, d.names, strict=True)):
                if not 0.8 * size <= e - s <= 1.25 * size:
                    continue
                key = (donor, i)
                sh = self._shingles.get(key)
                if sh is None:
                    sh = self._shingles[key] = _shingles(self._function_code(donor, d, s, e))
                union = len(mine | sh)
                if union:
                    scored.append((len(mine & sh) / union, n, donor))
        if not scored:
            return None
        scored.sort(reverse=True)
        best, name, donor = scored[0]
        other = next((sc for sc, n, _ in scored if n != name), 0.0)
        if ((best >= 0.5 and best >= 1.25 * other) or (size >= 64 and best >= 0.1 and best >= 2.0 * other)
                or (best >= 0.99 and other < best - 0.02)):
            return name, {"from": donor, "score": round(best, 3), "runner_up": round(other, 3)}
        _log.debug("%s %#x: no confident donor name (best %s %.3f, other %.3f)", target, start, name, best, other)
        return None
