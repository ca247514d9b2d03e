"""py-spy's collapsed native stacks -> per-op native function samples.

``py-spy record --native --format raw`` writes one line per distinct stack, ``frame;frame;... count``,
root first. Python frames read ``name (file.py:line)``; native frames ``name (libfoo.so.1)``, or
``name (file.c:line)`` when the library carries debug line info (inlined functions then appear as
frames of their own), or ``0x7f... (libfoo.so)`` when py-spy found no symbol.

The workload (:mod:`lotus.map._workload`) runs each measured op inside two marker functions,
``_lotus_run<r>`` and ``_lotus_op__<Op>``; warm-up happens outside them, so only samples below both
markers count. Each sample is charged to the *leaf* frame: its self time. A leaf that is Python code
(bytecode or CPython built-ins, which py-spy folds into the Python frame) is charged to
:data:`lotus.map.mapping.PYTHON_KEY`.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from lotus.errors import InputError
from lotus.map.mapping import PYTHON_KEY, UNKNOWN_MODULE, func_key, split_key

_log = logging.getLogger("lotus.map")

RUN_MARKER = "_lotus_run"
OP_MARKER = "_lotus_op__"
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]+$")
_LOCATION_LINE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")
_PY_SUFFIXES = (".py", ".pyw", ".pyx")


@dataclass(frozen=True)
class Frame:
    name: str
    kind: str  # "python", "native" (module known), "source" (native with file:line), "address"
    module: str | None = None  # library file name for native/address frames
    source: str | None = None  # file for python/source frames


def parse_frame(text: str) -> Frame:
    """One frame of a collapsed stack."""
    text = text.strip()
    name, loc = text, None
    if text.endswith(")"):
        idx = text.rfind(" (")
        if idx > 0:
            name, loc = text[:idx], text[idx + 2: -1]
    if loc is None:
        return Frame(name, "address" if _ADDRESS.match(name) else "native", None)
    m = _LOCATION_LINE.match(loc)
    if m:
        f = m.group("file")
        if f.endswith(_PY_SUFFIXES) or f.startswith("<"):
            return Frame(name, "python", source=f)
        return Frame(name, "source", source=f)
    if _ADDRESS.match(name):
        return Frame(name, "address", module=loc)
    return Frame(name, "native", module=loc)


def read_collapsed(path: str | os.PathLike) -> list[tuple[list[str], int]]:
    """The stacks of a py-spy raw (collapsed) file: ``[(frames root first, count)]``."""
    p = Path(path)
    if not p.exists():
        raise InputError("no such file (py-spy wrote no output)", p)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        line = line.rstrip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise InputError("malformed collapsed stack (expected 'frame;frame;... COUNT')", p, n)
        out.append((stack.split(";"), int(count)))
    return out


@dataclass
class Attribution:
    """Samples per (op, run, function, module) and what was left out."""

    profile: object  # DataFrame: op, run, function, module, value (samples)
    samples_per_op: dict[str, int]
    outside_samples: int  # warm-up, imports, between ops...
    context: dict[str, dict[str, int]]  # unnamed function key -> {nearest named caller key: samples}
    modules: dict[str, str]  # module file name -> path (from the maps, when given)


class _SourceNames:
    """Which library defines a function that py-spy printed with a source location."""

    def __init__(self, symbolizer, names: set[str]):
        self.found: dict[str, str] = {}
        if symbolizer is None or not names:
            return
        todo = set(names)
        paths = sorted({m.path for m in symbolizer.maps}, key=_size)
        for path in paths:
            if not todo:
                break
            if _size(path) > 256 * 2**20:
                continue  # the huge ones (libtorch_cpu, CUDA) ship without debug line info
            elf = symbolizer.elf(path)
            if elf is None or not elf.has_symtab:
                continue
            hit = todo.intersection(elf.names)
            for n in hit:
                self.found[n] = os.path.basename(path)
            todo -= hit


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 1 << 62


def attribute(stacks: list[tuple[list[str], int]], markers: dict[str, str], symbolizer=None) -> Attribution:
    """Charge each measured sample to its op (by marker) and to its leaf native function.

    ``markers`` maps marker function names (``_lotus_op__RandomResizedCrop``) to op names.
    ``symbolizer`` (:class:`lotus.map.symbols.Symbolizer` of the workload's maps) names raw
    addresses and finds the library of frames printed with a source location.
    """
    import pandas as pd

    parsed: list[tuple[str, str, list[Frame], int]] = []
    outside = 0
    source_names: set[str] = set()
    for frames, count in stacks:
        run = op = None
        op_idx = -1
        for i, f in enumerate(frames):
            head = f.split(" (", 1)[0]
            if head.startswith(RUN_MARKER):
                run = head[len(RUN_MARKER):]
            elif head.startswith(OP_MARKER) and run is not None:
                op = markers.get(head)
                op_idx = i
        if run is None or op is None:
            outside += count
            continue
        below = [parse_frame(f) for f in frames[op_idx + 1:]]
        source_names.update(f.name for f in below if f.kind == "source")
        parsed.append((op, run, below, count))
    names = _SourceNames(symbolizer, source_names)
    counts: Counter = Counter()
    context: dict[str, Counter] = defaultdict(Counter)
    per_op: Counter = Counter()
    for op, run, below, count in parsed:
        per_op[op] += count
        key, leaf_index = _leaf_key(below, names, symbolizer)
        counts[(op, run, key)] += count
        if key.startswith("func@"):
            caller = _named_caller(below[:leaf_index], names, symbolizer)
            if caller:
                context[key][caller] += count
    rows = []
    for (op, run, key), n in counts.items():
        func, module = split_key(key)
        rows.append({"op": op, "run": run, "function": func, "module": module, "value": float(n)})
    profile = pd.DataFrame(rows, columns=["op", "run", "function", "module", "value"])
    modules = symbolizer.module_paths() if symbolizer is not None else {}
    used = {m for m in profile["module"]} if not profile.empty else set()
    return Attribution(
        profile=profile,
        samples_per_op=dict(per_op),
        outside_samples=outside,
        context={k: dict(v.most_common(3)) for k, v in context.items()},
        modules={m: p for m, p in modules.items() if m in used},
    )


def _frame_key(f: Frame, names: _SourceNames, symbolizer, leaf: bool) -> str | None:
    """``func|module`` of a native frame, None for Python frames and inlined-only source frames."""
    if f.kind == "python":
        return None
    if f.kind == "native":
        return func_key(f.name, f.module)
    if f.kind == "address":
        if symbolizer is not None:
            addr = int(f.name, 16) - (0 if leaf else 1)  # return addresses point after the call
            found = symbolizer.resolve(addr)
            if found is not None:
                return func_key(*found)
        return func_key(f"func@{f.name}", f.module)
    module = names.found.get(f.name)
    return func_key(f.name, module) if module else None


def _leaf_key(below: list[Frame], names: _SourceNames, symbolizer) -> tuple[str, int]:
    """The key charged for a sample, and the index of the frame it came from."""
    if not below or below[-1].kind == "python":
        return PYTHON_KEY, len(below) - 1
    i = len(below) - 1
    # A source-located leaf may be an inlined function: climb to the first frame that is a symbol.
    while i >= 0:
        f = below[i]
        if f.kind == "python":
            break
        key = _frame_key(f, names, symbolizer, leaf=i == len(below) - 1)
        if key is not None:
            return key, i
        if f.kind != "source":
            break
        i -= 1
    leaf = below[-1]
    return func_key(leaf.name, UNKNOWN_MODULE), len(below) - 1


def _named_caller(frames: list[Frame], names: _SourceNames, symbolizer) -> str | None:
    for f in reversed(frames):
        if f.kind == "python":
            return None
        key = _frame_key(f, names, symbolizer, leaf=False)
        if key is not None and not key.startswith("func@"):
            return key
    return None
