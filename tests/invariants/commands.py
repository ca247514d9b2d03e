"""Every command that prints or writes numbers, run on one trace directory, and its outputs checked.

``check_run(run_dir, out_dir)`` runs (in this process, through click's runner) ``info``, ``analyze
stats|wait|verdict|gpu|throughput|ranks`` (text and ``--json``), ``report`` (HTML and report.json), ``whatif``,
``diff`` (against another run), ``viz`` and the figures' data frames, and returns every
broken invariant of :mod:`tests.invariants.rules`: in each output, between an output's text and its JSON,
between the report and the commands it repeats, and of the rates against the trace's batches.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from lotus.cli import cli
from tests.invariants import rules as R
from tests.invariants import trace_rules as T
from tests.invariants.rules import Violation

# fixed wording of the commands' text (numbers in it are no figures)
TEMPLATE = ("95% CI", "1 us - 1 ms", "> 1 ms", "> 500 ms")


@dataclass
class Result:
    args: list[str]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def where(self) -> str:
        return "lotus " + " ".join(a if "/" not in a else Path(a).name for a in self.args)


def lotus(*args) -> Result:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Result([str(a) for a in args], res.exit_code, res.stdout, res.stderr or "")


@contextlib.contextmanager
def engine(name: str | None):
    """``LOTUS_ENGINE=name`` for the commands run inside (None: the commands' own choice)."""
    old = os.environ.get("LOTUS_ENGINE")
    if name:
        os.environ["LOTUS_ENGINE"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LOTUS_ENGINE", None)
        else:
            os.environ["LOTUS_ENGINE"] = old


def check_answer(res: Result) -> list[Violation]:
    """Exit 0 (warnings allowed), or a one-line error and exit 1; stderr only ``lotus: ...`` lines; no
    traceback, no internal error."""
    out = []
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    if "Traceback" in res.stdout + res.stderr or "internal error" in res.stderr:
        out.append(Violation(res.where, "stderr", res.stderr[-400:], "a traceback or an internal error"))
    bad = [ln for ln in lines if not ln.startswith("lotus")]
    if bad:
        out.append(Violation(res.where, "stderr", bad[:3], "stderr lines that are not one-line lotus messages"))
    if res.exit_code not in (0, 1):
        out.append(Violation(res.where, "exit", res.exit_code, "exit code other than 0 or 1 (1: a one-line error)"))
    if res.exit_code == 1 and not any(ln.startswith("lotus: ") for ln in lines):
        out.append(Violation(res.where, "exit", 1, "exit 1 without a one-line message naming the problem"))
    return out


def _pair(args: list, text: bool = True) -> tuple[list[Violation], object]:
    """Run ``args`` with ``--json`` (and as text: then check that the text's figures are the JSON's)."""
    js = lotus(*args, "--json")
    out = check_answer(js)
    plain = lotus(*args) if text else None
    if plain is not None:
        out += check_answer(plain) + R.check_text(plain.stdout, plain.where)
    if js.exit_code not in (0, 1) or not js.stdout.strip():
        return out, None
    doc, bad = R.parse_json(js.stdout, js.where)
    out += bad + R.check_json(doc, js.where)
    if plain is not None:
        out += R.check_backed(plain.stdout, doc, plain.where, TEMPLATE)
    return out, doc


def _configs(doc) -> dict:
    return (doc or {}).get("configs") or (doc or {}).get("runs") or {}


def check_run(run_dir: Path, out_dir: Path, *, text: bool = True, diff_with: Path | None = None
              ) -> tuple[list[Violation], dict]:
    """Every command on ``run_dir``; returns the violations and the JSON documents by command. ``text``:
    also the text outputs and the HTML page, and that their figures are the JSON's (False: the JSON
    outputs only, e.g. on a second engine whose JSON is compared with the first's)."""
    from lotus.analysis.runs import load_config

    out: list[Violation] = []
    docs = {}
    for name, args in (("info", ["info"]), ("stats", ["analyze", "stats"]), ("wait", ["analyze", "wait"]),
                       ("verdict", ["analyze", "verdict"]), ("gpu", ["analyze", "gpu"]),
                       ("throughput", ["analyze", "throughput"]), ("ranks", ["analyze", "ranks"])):
        v, docs[name] = _pair([*args, "-d", run_dir], text)
        out += v
    rep = lotus("report", "-d", run_dir, "-o", out_dir / "report.html", "--no-figures")
    out += check_answer(rep) + R.check_text(rep.stdout, rep.where)
    if rep.exit_code == 0:
        page = (out_dir / "report.html").read_text()
        rdoc, bad = R.parse_json((out_dir / "report.json").read_text(), "report.json")
        docs["report"] = rdoc
        out += bad + R.check_json(rdoc, "report.json") + _report_repeats(rdoc, docs)
        if text:
            out += R.check_text(R.html_text(page), "report.html")
            out += R.check_backed(R.html_text(page), rdoc, "report.html", TEMPLATE)
    try:
        cfg = load_config(run_dir, engine="auto")
    except Exception:  # a directory of runs, or one lotus refuses: the commands above said so
        cfg = None
    if cfg is not None:
        out += _rates(cfg, docs)
        v, docs["whatif"] = _pair(["whatif", "-d", run_dir], text)
        out += v + _whatif_rate(docs["whatif"], cfg)
        if diff_with is not None:
            v, docs["diff"] = _pair(["diff", run_dir, diff_with], text)
            out += v
        out += _viz(run_dir, out_dir)
        out += _frames(cfg)
        if text:
            out += _export(run_dir, out_dir, docs.get("info"))
    return out, docs


def _report_repeats(rdoc: dict, docs: dict) -> list[Violation]:
    """The report shows the figures of verdict, stats, throughput: the same ones."""
    out = []
    for name, c in rdoc.get("configs", {}).items():
        for key, cmd, pick in (("verdict", "verdict", None), ("throughput", "throughput", c.get("throughput")),
                               ("stats", "stats", None)):
            mine = _configs(docs.get(cmd)).get(name)
            if mine is None:
                continue
            theirs = c[key]
            if cmd == "throughput":
                mine = {k: mine.get(k) for k in pick}
            if cmd == "stats":
                theirs = {k: theirs[k] for k in mine}
            if json.dumps(mine, sort_keys=True) != json.dumps(theirs, sort_keys=True):
                out.append(Violation("report.json", f"configs/{name}/{key}", "...",
                                     f"differs from `lotus analyze {cmd} --json`"))
    return out


def _rates(cfg, docs: dict) -> list[Violation]:
    """Every rate measured from the trace under what its batches could deliver; the trends' windows."""
    cap = T.rate_ceiling(cfg.batches)
    out = []
    t = _configs(docs.get("throughput")).get(cfg.name) or {}
    out += T.check_rate(t.get("samples_per_s"), cap, "analyze throughput --json", "samples_per_s")
    for i, r in enumerate(t.get("loaders") or []):
        out += T.check_rate(r.get("samples_per_s"), cap, "analyze throughput --json", f"loaders/{i}/samples_per_s")
    rep = (docs.get("report") or {}).get("configs", {}).get(cfg.name)
    if rep:
        out += T.check_rate(rep["throughput"].get("samples_per_s"), cap, "report.json", "throughput/samples_per_s")
        out += T.check_trends(rep["trends"], cfg.batches, "report.json")
    return out


def _whatif_rate(doc, cfg) -> list[Violation]:
    if not doc:
        return []
    return T.check_rate(doc["measured"].get("samples_per_s"), T.rate_ceiling(cfg.batches), "whatif --json",
                        "measured/samples_per_s")


def _viz(run_dir: Path, out_dir: Path) -> list[Violation]:
    path = out_dir / "trace.json"
    res = lotus("viz", "-d", run_dir, "-o", path)
    out = check_answer(res)
    if res.exit_code == 0:
        doc, bad = R.parse_json(path.read_text(), "viz trace.json")
        out += bad + T.check_chrome(doc, "viz trace.json")
    return out


def _export(run_dir: Path, out_dir: Path, info) -> list[Violation]:
    """Parquet of events and batches: the batches ``lotus info`` counts, no infinity, times >= 0."""
    import pandas as pd

    res = lotus("export", "-d", run_dir, "-o", out_dir / "parquet")
    out = check_answer(res)
    if res.exit_code:
        return out
    for name, inf in _configs(info).items():
        d = out_dir / "parquet" / (name if (out_dir / "parquet" / name).is_dir() else "")
        b = pd.read_parquet(d / "batches.parquet")
        n = inf["batches"]
        if len(b) < max(n["prepared"] + n["failed"], n["consumed"]):  # a row: a fetch or a hand-off
            out.append(Violation(res.where, "batches.parquet", len(b), f"fewer rows than lotus info counts ({n})"))
        times = [c for c in b.columns if c.endswith("_ns") and c not in ("delay_ns", "queue_ns")]
        out += T.check_frame(b[times], f"{res.where}: batches.parquet")
        ev = pd.read_parquet(d / "events.parquet", columns=["start_ns", "dur_ns"])
        out += T.check_frame(ev, f"{res.where}: events.parquet")
    return out


def _frames(cfg) -> list[Violation]:
    """The figures' data (lotus plot, the report's figures): finite, non-negative times."""
    from lotus.analysis import plotdata

    out = []
    frames = {"preprocessing": plotdata.preprocessing_frame([(cfg.name, cfg.batches)]),
              "ops": plotdata.op_frame([(cfg.name, cfg.events)]),
              "op_seconds": plotdata.op_seconds_frame([(cfg.name, cfg.events)]),
              "wait": plotdata.wait_frame(cfg.batches), "delay": plotdata.delay_frame(cfg.batches),
              "timeline": plotdata.timeline_frame(cfg.batches)}
    for name, df in frames.items():
        out += T.check_frame(df, f"plotdata.{name}")
    return out


# quantiles of op durations on the scan engine: within half a histogram bin (docs/analysis.md)
_APPROX = {"median", "p25", "p75", "p90", "p99", "iqr", "p50_ms", "p90_ms", "p99_ms"}


def same_figures(a, b, where: str, path: str = "") -> list[Violation]:
    """The figures of two engines' JSON documents: equal (op quantiles within 0.1%; float sums within 1e-9)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        if set(a) != set(b):
            return [Violation(where, path or "/", sorted(set(a) ^ set(b)), "keys differ between the engines")]
        for k in a:
            if k in ("path", "engine"):
                continue
            if (k == "iqr" and R._is_num(a[k]) and R._is_num(b[k]) and "ops_ms" in path  # p75 - p25 on the scan
                    and abs(a[k] - b[k]) <= 1e-3 * (abs(a["p25"]) + abs(a["p75"])) + 1e-12):  # engine: their errors
                continue
            if k in ("change", "change_pct") and _approx(path) and R._is_num(a[k]) and R._is_num(b[k]):
                err = 1e-3 * (abs(a["a"]) + abs(a["b"])) + 1e-12  # diff of two approximate quantiles
                if abs(a[k] - b[k]) <= (err if k == "change" else err / abs(a["a"]) * 100 + 1e-9):
                    continue
            out += same_figures(a[k], b[k], where, f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [Violation(where, path, (len(a), len(b)), "list lengths differ between the engines")]
        return [v for x, y in zip(a, b, strict=True) for v in same_figures(x, y, where, path)]
    if R._is_num(a) and R._is_num(b):
        tol = 1e-3 if _approx(path) else 1e-9
        if abs(a - b) <= tol * max(abs(a), abs(b)) + 1e-12:
            return []
    elif a == b:
        return []
    return [Violation(where, path, (a, b), "the engines give different figures")]


def _approx(path: str) -> bool:
    parts = path.split("/")
    return "ops_ms" in parts and bool(_APPROX & set(parts))


def compare_engines(mem: dict, scan: dict) -> list[Violation]:
    out = []
    for name in sorted(set(mem) | set(scan)):
        out += same_figures(mem.get(name), scan.get(name), f"{name}: memory vs scan")
    return out
