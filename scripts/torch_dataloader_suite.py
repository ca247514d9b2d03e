#!/usr/bin/env python
"""Run PyTorch's own ``test/test_dataloader.py`` three ways and compare: is lotus a drop-in?

    python scripts/torch_dataloader_suite.py PATH/TO/test_dataloader.py [--out DIR] [--timeout S]

The variants, run one after the other (never in parallel: the tests start many processes and some
check timings):

* ``stock``    -- plain ``python -m pytest`` on the file: torch's own DataLoader;
* ``untraced`` -- ``lotus run --no-trace -- python -m pytest ...``: lotus's DataLoader patched in for
  torch's in every process of the run (test subprocesses and spawned workers too), tracing off;
* ``traced``   -- ``lotus run -o TMPDIR -- python -m pytest ...``: the same, tracing on (the trace is
  written to a temporary directory, counted, then removed unless ``--keep-trace``).

Each variant writes a JUnit XML file; the script prints a table (passed / failed / skipped / errors
per variant) and the tests whose outcome differs from stock, and writes ``results.md`` and
``results.json`` in ``--out`` (with each variant's JUnit file, log and ``run-VARIANT.json``). Exit
status: 0 when every test that passes with stock torch passes in the lotus variants, 1 when one does
not or a variant left no JUnit results, 2 on a usage error or a Python that cannot run the file.

The test file is PyTorch's code: this script never downloads it and the repository does not hold it.
Get the version matching the installed torch (docs/compatibility.md says which commit and how).
pytest-timeout bounds each test (``--timeout``); psutil and expecttest must be importable (the file
and ``torch.testing._internal`` import them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

VARIANTS = ("stock", "untraced", "traced")
PASS, FAIL, SKIP, ERROR = "passed", "failed", "skipped", "error"


def pytest_command(python: str, test_file: Path, junit: Path, ini: Path, timeout: int, extra: list[str]) -> list[str]:
    return [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), "--rootdir",
            str(test_file.parent), f"--junitxml={junit}", f"--timeout={timeout}", "-rfE", *extra, str(test_file)]


def variant_command(variant: str, python: str, pytest_cmd: list[str], trace_dir: Path | None) -> list[str]:
    if variant == "stock":
        return pytest_cmd
    lotus = [python, "-m", "lotus", "run", "--no-verdict"]
    if variant == "untraced":
        return [*lotus, "--no-trace", "--", *pytest_cmd]
    return [*lotus, "-o", str(trace_dir), "--", *pytest_cmd]


def clean_env(slow: bool = False) -> dict[str, str]:
    """This environment without lotus's own settings (a stock run must not be a lotus run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    if slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"  # torch's @slowTest tests (test_proper_exit) run too
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and not Path(p).as_posix().rstrip("/").endswith("lotus/launch/_boot")]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


def parse_junit(path: Path) -> dict[str, dict]:
    """{test id: {"outcome": passed|failed|skipped|error, "message": str, "time": float}}."""
    results: dict[str, dict] = {}
    if not path.exists():
        return results
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        cls = classname.rsplit(".", 1)[-1]
        test_id = f"{cls}::{case.get('name', '')}" if cls else case.get("name", "")
        outcome, message = PASS, ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": FAIL, "error": ERROR, "skipped": SKIP}[child.tag]
                message = (child.get("message") or (child.text or "")).strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                break
        # a test can carry both a failure and a teardown error: keep the worse
        if test_id in results and results[test_id]["outcome"] in (FAIL, ERROR):
            continue
        results[test_id] = {"outcome": outcome, "message": message, "time": float(case.get("time") or 0)}
    return results


def count(results: dict[str, dict]) -> dict[str, int]:
    out = {PASS: 0, FAIL: 0, SKIP: 0, ERROR: 0}
    for r in results.values():
        out[r["outcome"]] += 1
    out["total"] = len(results)
    return out


def trace_size(trace_dir: Path) -> tuple[int, int]:
    files = [p for p in trace_dir.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def preflight(python: str) -> bool:
    """Can ``python`` run the file? torch.testing._internal needs expecttest; the file uses psutil."""
    probe = ("import importlib.util as u, sys\n"
             "missing = [m for m in ('torch', 'lotus', 'pytest', 'pytest_timeout', 'expecttest', 'psutil')"
             " if u.find_spec(m) is None]\nprint(' '.join(missing))")
    try:
        missing = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=clean_env(),
                                 check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cannot run {python}: {exc}", file=sys.stderr)
        return False
    if "psutil" in missing:
        print("note: psutil is missing, so the file skips the tests that need it (pip install psutil)",
              file=sys.stderr)
        missing.remove("psutil")
    if missing:
        names = {"lotus": "-e .", "pytest_timeout": "pytest-timeout"}
        print(f"{python} lacks {', '.join(missing)}: pip install {' '.join(names.get(m, m) for m in missing)}",
              file=sys.stderr)
        return False
    return True


def run_variant(variant: str, args, test_file: Path, out: Path, ini: Path) -> dict:
    junit = out / f"junit-{variant}.xml"
    log = out / f"log-{variant}.txt"
    junit.unlink(missing_ok=True)
    trace_dir = Path(tempfile.mkdtemp(prefix="lotus-suite-trace-")) if variant == "traced" else None
    cmd = variant_command(variant, args.python, pytest_command(args.python, test_file, junit, ini, args.timeout,
                                                               args.pytest_args), trace_dir)
    print(f"== {variant}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    with open(log, "wb") as f:
        rc = subprocess.call(cmd, cwd=test_file.parent, env=clean_env(args.slow), stdout=f, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    info = {"variant": variant, "command": cmd, "exit_code": rc, "wall_s": round(wall, 1), "junit": str(junit),
            "log": str(log), "results": parse_junit(junit)}
    if trace_dir is not None:
        info["trace_files"], info["trace_bytes"] = trace_size(trace_dir)
        if args.keep_trace:
            info["trace_dir"] = str(trace_dir)
        else:
            shutil.rmtree(trace_dir, ignore_errors=True)
    (out / f"run-{variant}.json").write_text(json.dumps({k: v for k, v in info.items() if k != "results"}, indent=1))
    c = count(info["results"])
    print(f"   {variant}: {c[PASS]} passed, {c[FAIL]} failed, {c[SKIP]} skipped, {c[ERROR]} errors "
          f"in {wall:.0f} s (exit {rc})", flush=True)
    if not info["results"]:
        print(f"   no JUnit results: see {log}", flush=True)
    return info


def load_variant(variant: str, out: Path) -> dict:
    """A variant run earlier into ``out`` (its run-VARIANT.json and JUnit file)."""
    meta = out / f"run-{variant}.json"
    info = json.loads(meta.read_text()) if meta.exists() else {"variant": variant, "wall_s": "?"}
    info["results"] = parse_junit(out / f"junit-{variant}.xml")
    return info


def differences(runs: dict[str, dict]) -> list[dict]:
    """Tests whose outcome in a lotus variant differs from stock (regression: stock passed, lotus not)."""
    stock = runs.get("stock", {}).get("results", {})
    rows = []
    for variant, info in runs.items():
        if variant == "stock":
            continue
        res = info["results"]
        for test_id in sorted(set(stock) | set(res)):
            a = stock.get(test_id, {}).get("outcome", "absent")
            b = res.get(test_id, {}).get("outcome", "absent")
            if a != b:
                rows.append({"variant": variant, "test": test_id, "stock": a, "lotus": b,
                             "regression": a == PASS and b != PASS,
                             "message": res.get(test_id, {}).get("message", "")})
    return rows


def render(runs: dict[str, dict], diffs: list[dict], test_file: Path) -> str:
    lines = [f"PyTorch DataLoader tests: `{test_file.name}`", "",
             "| variant | passed | failed | skipped | errors | total | wall (s) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for variant, info in runs.items():
        c = count(info["results"])
        cells = [variant, c[PASS], c[FAIL], c[SKIP], c[ERROR], c["total"], info["wall_s"]]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    traced = runs.get("traced")
    if traced is not None and "trace_files" in traced:
        lines += ["", f"traced run: {traced['trace_files']} trace files, {traced['trace_bytes']} bytes written"]
    lines += [""]
    if diffs:
        lines += ["Outcomes that differ from stock:", "", "| variant | test | stock | lotus | message |",
                  "| --- | --- | --- | --- | --- |"]
        for d in diffs:
            msg = d["message"].replace("|", "\\|")
            lines.append(f"| {d['variant']} | {d['test']} | {d['stock']} | {d['lotus']} | {msg} |")
    else:
        lines.append("No outcome differs from stock.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("test_file", type=Path, help="PyTorch's test/test_dataloader.py (matching the installed torch)")
    p.add_argument("--out", type=Path, default=Path(".cache/torch-suite"),
                   help="where JUnit files, logs and results go (default: .cache/torch-suite)")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated subset of {','.join(VARIANTS)} (default: all)")
    p.add_argument("--timeout", type=int, default=900, help="pytest-timeout per test, seconds (default 900)")
    p.add_argument("--python", default=sys.executable, help="the Python that has torch and lotus (default: this one)")
    p.add_argument("--keep-trace", action="store_true", help="keep the traced run's trace directory")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: tabulate the JUnit files already in --out (variants run separately)")
    p.add_argument("--slow", action="store_true",
                   help="also run torch's @slowTest tests (PYTORCH_TEST_WITH_SLOW=1: test_proper_exit, minutes)")
    p.epilog = "Extra pytest arguments go after --, e.g. `... test_dataloader.py -- -k typing`."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = p.parse_args(argv)
    args.pytest_args = extra
    test_file = args.test_file.resolve()
    if not test_file.is_file():
        p.error(f"{args.test_file}: no such file (see docs/compatibility.md for how to get it)")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        p.error(f"unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    if not args.report_only and not preflight(args.python):
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    ini = out / "pytest.ini"  # an empty config: the repository's pytest settings must not apply to torch's file
    ini.write_text("[pytest]\n")
    if args.report_only:
        runs = {v: load_variant(v, out) for v in variants if (out / f"junit-{v}.xml").exists()}
    else:
        runs = {v: run_variant(v, args, test_file, out, ini) for v in variants}
    diffs = differences(runs)
    text = render(runs, diffs, test_file)
    print()
    print(text, end="")
    (out / "results.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"test_file": str(test_file), "runs": runs, "differences": diffs},
                                                 indent=1))
    print(f"\nresults: {out / 'results.md'}")
    regressions = [d for d in diffs if d["regression"]]
    if any(not info["results"] for info in runs.values()):
        return 1
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
