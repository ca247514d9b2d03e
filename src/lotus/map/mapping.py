"""The LotusMap mapping: which native functions each Python op runs, and how much of the op each is.

Schema (a superset of the original study's ``mapping_funcs.json``)::

    {
      "op_to_func": {op: ["func|module", ...]},           # by weight, largest first
      "common_funcs_to_op": {"func|module": [op, ...]},   # functions seen under more than one op
      "weights": {op: {"func|module": share}},            # share of the op's samples / CPU time
      "support": {op: {"func|module": fraction_of_runs}}, # in how many of the op's runs it was seen
      "lotus": {"schema": "lotusmap/1", "backend": ..., "runs": {op: n}, ...}
    }

Files with only the first two keys (the study's) are valid input everywhere.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path

from lotus.errors import InputError

_log = logging.getLogger("lotus.map")

SCHEMA = "lotusmap/1"
UNKNOWN_MODULE = "[Unknown]"
PYTHON_KEY = "[Python interpreter]|python"  # py-spy samples whose leaf is Python code, not a native function
PROFILE_COLUMNS = ("op", "run", "function", "module", "value")


def func_key(function: str, module: str | None) -> str:
    """``"func|module"``; a missing module (None, NaN, empty) is ``[Unknown]`` as in VTune."""
    if module is None or (isinstance(module, float) and math.isnan(module)) or not str(module).strip():
        module = UNKNOWN_MODULE
    return f"{function}|{module}"


def split_key(key: str) -> tuple[str, str]:
    """``"decode_mcu|libjpeg.so.9"`` -> ``("decode_mcu", "libjpeg.so.9")``; the module is after the last ``|``."""
    func, sep, module = key.rpartition("|")
    if not sep:
        return key, UNKNOWN_MODULE
    return func, module


def natural_key(text: str) -> list:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", str(text))]


def build_mapping(profile, *, min_support: float = 0.0, op_order: list[str] | None = None,
                  runs: dict[str, int] | None = None, meta: dict | None = None) -> dict:
    """The mapping of a long profile table: one row per (op, run, function, module) with a ``value``.

    ``value`` is what the run measured for that function (CPU seconds, sample counts...). A function
    belongs to an op when it was seen in at least ``min_support`` (a fraction) of the op's runs;
    ``min_support=0`` is the union over runs, as in the study. Weights are the function's share of
    all of the op's value over all runs; they are computed before the support filter, so the weights
    of the kept functions may sum to less than 1. ``runs`` gives the number of runs per op when some
    runs saw nothing (default: the runs present in ``profile``).
    """
    if not 0.0 <= min_support <= 1.0:
        raise ValueError(f"min_support must be a fraction in [0, 1], not {min_support}")
    missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise ValueError(f"profile lacks columns {missing}")
    ops = list(op_order or [])
    for op in sorted(profile["op"].unique(), key=natural_key):
        if op not in ops:
            ops.append(op)
    op_to_func: dict[str, list[str]] = {}
    weights: dict[str, dict[str, float]] = {}
    support: dict[str, dict[str, float]] = {}
    n_runs: dict[str, int] = {}
    for op in ops:
        part = profile[profile["op"] == op]
        n = int((runs or {}).get(op, part["run"].nunique()))
        n_runs[op] = n
        if part.empty or n == 0:
            op_to_func[op], weights[op], support[op] = [], {}, {}
            continue
        keys = [func_key(f, m) for f, m in zip(part["function"], part["module"], strict=True)]
        part = part.assign(key=keys)
        total = float(part["value"].sum())
        by_key = part.groupby("key", sort=False).agg(value=("value", "sum"), runs=("run", "nunique"))
        w = {k: (float(v) / total if total > 0 else 0.0) for k, v in by_key["value"].items()}
        s = {k: min(1.0, int(r) / n) for k, r in by_key["runs"].items()}
        kept = [k for k in by_key.index if s[k] + 1e-12 >= min_support and k != PYTHON_KEY]
        kept.sort(key=lambda k: (-w[k], k))
        op_to_func[op] = kept
        weights[op] = {k: round(w[k], 6) for k in sorted(w, key=lambda k: (-w[k], k))}
        support[op] = {k: round(s[k], 6) for k in weights[op]}
    out = {
        "op_to_func": op_to_func,
        "common_funcs_to_op": common_funcs(op_to_func),
        "weights": weights,
        "support": support,
        "lotus": {"schema": SCHEMA, "min_support": min_support, "runs": n_runs, **(meta or {})},
    }
    return out


def common_funcs(op_to_func: dict[str, list[str]]) -> dict[str, list[str]]:
    """Functions listed under more than one op, with those ops (in op order)."""
    seen: dict[str, list[str]] = {}
    for op, funcs in op_to_func.items():
        for f in funcs:
            seen.setdefault(f, [])
            if op not in seen[f]:
                seen[f].append(op)
    return {f: ops for f, ops in sorted(seen.items()) if len(ops) > 1}


def load_mapping(path: str | os.PathLike) -> dict:
    """A mapping JSON (lotus's or the study's ``mapping_funcs.json``), validated.

    Raises :class:`InputError` naming the file for missing keys or wrong types. Missing
    ``common_funcs_to_op`` is recomputed; missing weights stay absent.
    """
    p = Path(path)
    if not p.exists():
        raise InputError("no such file", p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", p, exc.lineno) from None
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file (expected a mapping JSON)", p) from None
    if not isinstance(data, dict) or not isinstance(data.get("op_to_func"), dict):
        raise InputError('not a mapping: expected a JSON object with "op_to_func": {op: ["func|module", ...]} '
                         'and optionally "common_funcs_to_op", "weights"', p)
    for op, funcs in data["op_to_func"].items():
        if not isinstance(funcs, list) or not all(isinstance(f, str) for f in funcs):
            raise InputError(f'"op_to_func"["{op}"] must be a list of "func|module" strings', p)
    if not isinstance(data.get("common_funcs_to_op"), dict):
        data["common_funcs_to_op"] = common_funcs(data["op_to_func"])
    weights = data.get("weights")
    if weights is not None:
        if not isinstance(weights, dict) or not all(isinstance(v, dict) for v in weights.values()):
            raise InputError('"weights" must be {op: {"func|module": share}}', p)
        for op, w in weights.items():
            for k, v in w.items():
                if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) or v < 0:
                    raise InputError(f'"weights"["{op}"]["{k}"] must be a non-negative number, not {v!r}', p)
    return data


def save_mapping(mapping: dict, path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(mapping, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return p


def profile_dirs(root: str | os.PathLike) -> dict[str, list[Path]]:
    """``root/<Op>/<run>.csv`` -> ``{op: [csv files]}`` (natural order); InputError for another layout."""
    r = Path(root)
    if not r.exists():
        raise InputError("no such directory", r)
    if not r.is_dir():
        raise InputError("not a directory (expected <dir>/<Op>/<run>.csv)", r)
    out: dict[str, list[Path]] = {}
    for sub in sorted((d for d in r.iterdir() if d.is_dir()), key=lambda d: natural_key(d.name)):
        files = sorted((f for f in sub.iterdir() if f.is_file() and f.suffix.lower() in (".csv", ".txt")),
                       key=lambda f: natural_key(f.name))
        if files:
            out[sub.name] = files
        else:
            _log.warning("%s: no .csv run files, op left out", sub)
    if not out:
        loose = [f.name for f in r.iterdir() if f.is_file()][:3]
        hint = f" (found files {loose} directly in it)" if loose else ""
        raise InputError("unknown layout: expected one folder per op holding one CSV per run, "
                         f"<dir>/<Op>/<run>.csv{hint}", r)
    return out


def import_profiles(root: str | os.PathLike, kind: str):
    """The long profile table (:data:`PROFILE_COLUMNS`) of a directory of per-op runs.

    ``kind`` is ``"vtune"`` (``vtune -report hotspots -format csv`` files; value = CPU seconds) or
    ``"uprof"`` (uProf reports; value = the first event, e.g. CPU_TIME samples). A run file that
    cannot be read is left out with a warning naming it; no readable file at all raises.
    """
    import pandas as pd

    from lotus.map.uprof import read_uprof
    from lotus.map.vtune import read_vtune_hotspots

    if kind not in ("vtune", "uprof"):
        raise ValueError(f"kind must be 'vtune' or 'uprof', not {kind!r}")
    parts = []
    runs: dict[str, int] = {}
    errors: list[InputError] = []
    for op, files in profile_dirs(root).items():
        for f in files:
            try:
                if kind == "vtune":
                    df = read_vtune_hotspots(f)
                    value = df["cpu_time_s"]
                else:
                    df = read_uprof(f)
                    value = df[df.attrs["events"][0]]
            except InputError as exc:
                _log.warning("%s; run left out", exc)
                errors.append(exc)
                continue
            runs[op] = runs.get(op, 0) + 1
            parts.append(pd.DataFrame({"op": op, "run": f.stem, "function": df["function"],
                                       "module": df["module"], "value": value.astype("float64")}))
    if not runs:
        first = errors[0] if errors else None
        raise InputError(f"no readable {kind} run file" + (f" (first error: {first})" if first else ""), root)
    profile = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=PROFILE_COLUMNS)
    profile.attrs["runs"] = runs
    profile.attrs["skipped"] = [str(e) for e in errors]
    return profile


def import_mapping(root: str | os.PathLike, kind: str, *, min_support: float = 0.0) -> dict:
    """:func:`import_profiles` then :func:`build_mapping`: the mapping of the study's export layout."""
    profile = import_profiles(root, kind)
    meta = {"backend": kind, "source": str(root), "weight_basis":
            "CPU Time (s) of the function / CPU Time of all the op's functions, over all runs" if kind == "vtune"
            else "first event count (e.g. CPU_TIME samples) of the function / the op's total, over all runs"}
    if profile.attrs["skipped"]:
        meta["skipped_files"] = profile.attrs["skipped"]
    return build_mapping(profile, min_support=min_support, runs=profile.attrs["runs"], meta=meta)
