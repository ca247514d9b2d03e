"""Hardware metrics per Python op: VTune microarchitecture grids attributed through a LotusMap mapping.

For each native function row of a grid, the ops whose mapping lists it get its metrics:

* one op: all of it;
* several ops and a trace: split in proportion to each op's traced CPU time (times the op's weight
  for that function when the mapping has weights: an op that spends 30% of its time in ``memmove``
  gets more of ``memmove`` than one that spends 2%);
* several ops and no trace: reported once, as op ``"[shared] A, B"``;
* no op: op ``"[unmapped]"`` (kept, so that every config's totals add up).

Additive metrics (CPU time, clockticks, instructions) are scaled by the share; per-op ratios are
recomputed from the sums: CPI = clockticks / instructions, top-down fractions weighted by
clockticks, frequency = clockticks / CPU time.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path

from lotus.errors import InputError
from lotus.map.mapping import natural_key, split_key

_log = logging.getLogger("lotus.map")

ADDITIVE = ("cpu_time_s", "clockticks", "instructions_retired")
TOPDOWN = ("retiring_frac", "front_end_bound_frac", "bad_speculation_frac", "memory_bound_frac", "core_bound_frac")
UNMAPPED = "[unmapped]"
SHARED_PREFIX = "[shared] "
TRACE_OPS = {"load": "Loader", "collate": "Collation"}
_UARCH_SUFFIXES = (".csv", ".tsv", ".txt")


def loose_name(func: str) -> str:
    """A function name without what compilers and profilers add: leading ``_``, ``.isra.0``, ``void ``, args."""
    f = func.strip()
    if f.startswith("void "):
        f = f[5:]
    f = re.sub(r"(\.(isra|constprop|part|cold|lto_priv)(\.\d+)?)+$", "", f)
    if f.endswith(")") and "(" in f and not f.startswith("func@"):
        depth = 0
        for i in range(len(f) - 1, -1, -1):
            depth += f[i] == ")"
            depth -= f[i] == "("
            if depth == 0:
                f = f[:i] if i > 0 else f
                break
    return f.lstrip("_")


class OpIndex:
    """Which ops of a mapping list a function, by exact name and then by :func:`loose_name`."""

    def __init__(self, mapping: dict):
        self.ops = list(mapping["op_to_func"])
        self.weights = mapping.get("weights") or {}
        self.exact: dict[str, list[str]] = {}
        self.loose: dict[str, list[str]] = {}
        self.keys: dict[tuple[str, str], str] = {}  # (op, func) -> key in the mapping
        for op, keys in mapping["op_to_func"].items():
            for key in keys:
                func, _ = split_key(key)
                for index, name in ((self.exact, func), (self.loose, loose_name(func))):
                    lst = index.setdefault(name, [])
                    if op not in lst:
                        lst.append(op)
                self.keys.setdefault((op, func), key)
                self.keys.setdefault((op, loose_name(func)), key)

    def ops_of(self, func: str) -> tuple[list[str], str]:
        """The ops of a function and how they were found (``exact``, ``loose`` or ``none``)."""
        if func in self.exact:
            return self.exact[func], "exact"
        lf = loose_name(func)
        if lf and lf in self.loose:
            return self.loose[lf], "loose"
        return [], "none"

    def weight(self, op: str, func: str) -> float | None:
        key = self.keys.get((op, func)) or self.keys.get((op, loose_name(func)))
        w = self.weights.get(op, {})
        return float(w[key]) if key in w else None


def with_derived(df):
    """``memory_bound_frac`` = 1 - retiring - front-end - bad speculation - core bound, when not exported."""
    need = ("retiring_frac", "front_end_bound_frac", "bad_speculation_frac", "core_bound_frac")
    if "memory_bound_frac" in df.columns or not all(c in df.columns for c in need):
        return df
    rest = 1.0 - sum(df[c].fillna(0.0) for c in need)
    out = df.copy()
    out["memory_bound_frac"] = rest.clip(lower=0.0, upper=1.0)
    out.loc[df[list(need)].isna().all(axis=1), "memory_bound_frac"] = math.nan
    out.attrs = dict(df.attrs)
    out.attrs.setdefault("derived", []).append("memory_bound_frac")
    return out


def attribute_hw(uarch, mapping: dict, op_seconds: dict[str, float] | None = None, config: str = ""):
    """One row per (function row of ``uarch``, op it is attributed to) with the op's share of it.

    Columns: ``config``, ``function``, ``module``, ``op``, ``share``, ``split`` (``sole``, ``trace``,
    ``trace*weight``, ``shared``, ``unmapped``), ``match`` (``exact``/``loose``/``none``), then the
    additive metrics scaled by ``share`` and the other numeric metrics of the function unchanged.
    """
    import pandas as pd

    index = OpIndex(mapping)
    df = with_derived(uarch)
    metric_cols = [c for c in df.columns if c not in ("function", "module") and pd.api.types.is_numeric_dtype(df[c])]
    rows = []
    secs = {k: float(v) for k, v in (op_seconds or {}).items() if v and v > 0}
    for rec in df.to_dict("records"):
        func = rec["function"]
        ops, how = index.ops_of(func)
        if not ops:
            parts = [(UNMAPPED, 1.0, "unmapped")]
        elif len(ops) == 1:
            parts = [(ops[0], 1.0, "sole")]
        elif all(o in secs for o in ops):
            ws = [index.weight(o, func) for o in ops]
            if all(w is not None and w > 0 for w in ws):
                raw, split = [secs[o] * w for o, w in zip(ops, ws, strict=True)], "trace*weight"
            else:
                raw, split = [secs[o] for o in ops], "trace"
            total = sum(raw)
            parts = [(o, r / total, split) for o, r in zip(ops, raw, strict=True)]
        else:
            parts = [(SHARED_PREFIX + ", ".join(ops), 1.0, "shared")]
        for op, share, split in parts:
            row = {"config": config, "function": func, "module": rec.get("module"), "op": op, "share": share,
                   "split": split, "match": how}
            for c in metric_cols:
                v = rec[c]
                row[c] = v * share if c in ADDITIVE and v is not None else v
            rows.append(row)
    out = pd.DataFrame(rows, columns=["config", "function", "module", "op", "share", "split", "match", *metric_cols])
    return out


def op_metrics(attributed):
    """Per (config, op): sums of the additive metrics and the recomputed ratios."""
    import numpy as np
    import pandas as pd

    if attributed.empty:
        return pd.DataFrame(columns=["config", "op", "functions", *ADDITIVE])
    df = attributed.copy()
    weight_col = "clockticks" if "clockticks" in df.columns else "cpu_time_s"
    fracs = [c for c in df.columns if c.endswith("_frac")]
    for c in fracs:
        df[f"_w_{c}"] = df[c] * df[weight_col]
        df[f"_n_{c}"] = df[weight_col].where(df[c].notna(), 0.0)
    agg = {"functions": ("function", "nunique")}
    for c in ADDITIVE:
        if c in df.columns:
            agg[c] = (c, "sum")
    for c in fracs:
        agg[f"_w_{c}"] = (f"_w_{c}", "sum")
        agg[f"_n_{c}"] = (f"_n_{c}", "sum")
    g = df.groupby(["config", "op"], sort=False).agg(**agg).reset_index()
    for c in fracs:
        g[c] = g[f"_w_{c}"] / g[f"_n_{c}"].replace(0.0, np.nan)
        g = g.drop(columns=[f"_w_{c}", f"_n_{c}"])
    if "clockticks" in g.columns and "instructions_retired" in g.columns:
        g["cpi"] = g["clockticks"] / g["instructions_retired"].replace(0.0, np.nan)
    if "clockticks" in g.columns and "cpu_time_s" in g.columns:
        g["average_frequency_ghz"] = g["clockticks"] / g["cpu_time_s"].replace(0.0, np.nan) / 1e9
    if "cpu_time_s" in g.columns:
        total = g.groupby("config")["cpu_time_s"].transform("sum")
        g["cpu_time_share"] = g["cpu_time_s"] / total.replace(0.0, np.nan)
    order = ["config", "op", "functions", *[c for c in ADDITIVE if c in g.columns], "cpi", *TOPDOWN,
             "average_frequency_ghz", "cpu_time_share"]
    cols = [c for c in order if c in g.columns] + [c for c in g.columns if c not in order]
    g = g[cols]
    order_idx = sorted(range(len(g)), key=lambda i: (natural_key(g["config"].iat[i]), g["op"].iat[i].startswith("["),
                                                     natural_key(g["op"].iat[i])))
    return g.iloc[order_idx].reset_index(drop=True)


def read_uarch_dir(path: str | os.PathLike) -> tuple[dict, dict]:
    """``({config: uarch DataFrame}, {config: summary dict})`` of a directory of VTune exports.

    Files whose name holds ``summary`` are read with :func:`read_vtune_summary` (config = the name
    without it), the others with :func:`read_vtune_uarch` (config = the file stem). A single file is
    accepted too. Unreadable files are left out with a warning; none readable raises.
    """
    from lotus.map.vtune import read_vtune_summary, read_vtune_uarch

    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", p)
    if p.is_file():
        files = [p]
    else:
        files = sorted((f for f in p.iterdir() if f.is_file() and f.suffix.lower() in _UARCH_SUFFIXES),
                       key=lambda f: natural_key(f.name))
    grids: dict = {}
    summaries: dict = {}
    errors = []
    for f in files:
        is_summary = "summary" in f.stem.lower()
        config = re.sub(r"[-_.]?summary[-_.]?", "", f.stem, flags=re.IGNORECASE) or f.stem
        try:
            if is_summary:
                summaries[config] = read_vtune_summary(f)
            else:
                grids[config] = read_vtune_uarch(f)
        except InputError as exc:
            _log.warning("%s; file left out", exc)
            errors.append(str(exc))
    if not grids:
        detail = f" ({errors[0]})" if errors else f" (expected *{', *'.join(_UARCH_SUFFIXES)} VTune grid exports)"
        raise InputError("no readable VTune microarchitecture grid" + detail, p)
    return grids, summaries


def traced_op_seconds(trace_dir: str | os.PathLike):
    """Per run and op: traced CPU seconds (``cat == "op"`` events, plus load -> Loader, collate -> Collation).

    Columns: ``run``, ``op``, ``cpu_s``, ``events``, ``mean_ms``.
    """
    import pandas as pd

    from lotus.trace import events_of_run, find_runs

    frames = []
    for run in find_runs(trace_dir):
        ev = events_of_run(run)
        name = ev["name"].astype(str)
        is_op = ev["cat"].astype(str) == "op"
        mapped = name.map(TRACE_OPS)
        op = name.where(is_op, mapped)
        keep = is_op | mapped.notna()
        part = pd.DataFrame({"op": op[keep], "dur_ns": ev["dur_ns"][keep]})
        g = part.groupby("op", sort=False)["dur_ns"].agg(["sum", "count"]).reset_index()
        frames.append(pd.DataFrame({"run": run.name, "op": g["op"], "cpu_s": g["sum"] / 1e9, "events": g["count"],
                                    "mean_ms": g["sum"] / g["count"] / 1e6}))
    if not frames:
        return pd.DataFrame(columns=["run", "op", "cpu_s", "events", "mean_ms"])
    return pd.concat(frames, ignore_index=True)


def op_seconds_for(traced, config: str) -> tuple[dict[str, float], str]:
    """Op seconds for a config: its own traced run when one has the config's name, else all runs pooled."""
    if traced is None or traced.empty:
        return {}, "none"
    own = traced[traced["run"].astype(str).str.rsplit("/", n=1).str[-1] == config]
    if not own.empty:
        return dict(zip(own["op"], own["cpu_s"], strict=True)), "run"
    pooled = traced.groupby("op")["cpu_s"].sum()
    return {k: float(v) for k, v in pooled.items()}, "pooled"


def hw_tables(uarch_dir: str | os.PathLike, mapping: dict, trace_dir: str | os.PathLike | None = None) -> dict:
    """All tables of ``lotus hw``: ``functions``, ``ops``, and ``trace`` / ``summary`` when available."""
    import pandas as pd

    grids, summaries = read_uarch_dir(uarch_dir)
    traced = traced_op_seconds(trace_dir) if trace_dir is not None else None
    parts = []
    basis = {}
    for config, grid in grids.items():
        secs, how = op_seconds_for(traced, config)
        basis[config] = how
        parts.append(attribute_hw(grid, mapping, secs, config))
    functions = pd.concat(parts, ignore_index=True)
    out = {"functions": functions, "ops": op_metrics(functions), "split_basis": basis}
    if traced is not None:
        out["trace"] = traced
    if summaries:
        rows = [{"config": c, **{k: v for k, v in s.items() if not isinstance(v, (dict, list))}}
                for c, s in summaries.items()]
        out["summary"] = pd.DataFrame(rows)
    mapped = functions[functions["op"] != UNMAPPED]
    for config in grids:
        tot = functions.loc[functions["config"] == config, "cpu_time_s"].sum() if "cpu_time_s" in functions else 0
        got = mapped.loc[mapped["config"] == config, "cpu_time_s"].sum() if "cpu_time_s" in mapped else 0
        if tot > 0:
            _log.info("%s: %.1f%% of CPU time attributed to mapped functions", config, 100 * got / tot)
    return out
