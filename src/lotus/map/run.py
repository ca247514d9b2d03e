"""``lotus map run``: run each op in isolation under a profiler and build the mapping.

:func:`map_run` starts the workload (:mod:`lotus.map._workload`) as a child process and drives
the chosen backend (:mod:`lotus.map.backends`); it returns the mapping dict
(:mod:`lotus.map.mapping`), with the run's details under ``"lotus"``.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from lotus.errors import InputError
from lotus.map import backends as B
from lotus.map.mapping import build_mapping, import_profiles

_log = logging.getLogger("lotus.map")


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "torchvision", "pillow", "py-spy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _spec(work: Path, name: str, **kw) -> tuple[Path, dict]:
    spec = {"result_file": str(work / f"{name}.result.json"), **kw}
    path = work / f"{name}.spec.json"
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return path, spec


def _read_result(spec: dict, log: Path | None = None) -> dict:
    path = Path(spec["result_file"])
    if not path.exists():
        tail = _tail(log)
        raise B.ToolError(f"the workload wrote no result (it crashed?){': ' + tail if tail else ''}")
    result = json.loads(path.read_text(encoding="utf-8"))
    fatal = result.get("fatal")
    if fatal:
        raise InputError(f"the workload could not run: {fatal}")
    return result


def _tail(log: Path | None, n: int = 3) -> str:
    if log is None or not log.exists():
        return ""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[:500]


def map_run(
    *,
    ops: list[str] | None = None,
    pipeline: str | None = None,
    image: str | os.PathLike | None = None,
    runs: int = 3,
    backend: str = "auto",
    seconds: float = 1.0,
    rate: int = 250,
    batch_size: int = 128,
    threads: int = 1,
    min_support: float = 0.0,
    work_dir: str | os.PathLike | None = None,
    timeout_s: float = 900.0,
    settle_s: float = 1.0,
    symbols_from: list[str] | None = None,
    borrow_names: bool = True,
) -> dict:
    """Map each op to the native functions it runs; see :mod:`lotus.map` and docs/lotusmap.md."""
    if image is not None and not Path(image).is_file():
        raise InputError("no such image file", image)
    if runs < 1 or seconds <= 0:
        raise InputError(f"--runs must be >= 1 and --seconds > 0 (got {runs}, {seconds})")
    backend = B.auto_backend() if backend == "auto" else backend
    exe = B.require(backend)
    keep = work_dir is not None
    work = Path(work_dir) if keep else Path(tempfile.mkdtemp(prefix="lotus-map-"))
    work.mkdir(parents=True, exist_ok=True)
    common = {"ops": list(ops) if ops else None, "pipeline": pipeline,
              "image": str(Path(image).resolve()) if image else None, "batch_size": batch_size,
              "threads": threads, "seconds": seconds}
    try:
        if backend == "pyspy":
            mapping = _run_pyspy(exe, work, common, runs=runs, rate=rate, min_support=min_support,
                                 timeout_s=timeout_s, settle_s=settle_s, symbols_from=symbols_from,
                                 borrow_names=borrow_names)
        else:
            mapping = _run_collector(backend, exe, work, common, runs=runs, min_support=min_support,
                                     timeout_s=timeout_s)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    meta = mapping["lotus"]
    meta.update({"pipeline": pipeline or "default (torchvision ImageNet training transforms)",
                 "image": str(image) if image else "lotus/demo/photos (default)",
                 "seconds_per_op_per_run": seconds, "batch_size": batch_size, "threads": threads,
                 "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "system": platform.platform()},
                 "versions": _versions()})
    if keep:
        meta["work_dir"] = str(work)
    return mapping


def _pump(stream, lines: list[str], started: threading.Event) -> None:
    for line in stream:
        lines.append(line.rstrip())
        if "Sampling process" in line:
            started.set()
    started.set()


def _wait_ready(proc: subprocess.Popen, ready: Path, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if proc.poll() is not None:
            return  # exited early: the result file says why
        if time.monotonic() > deadline:
            proc.kill()
            raise B.ToolError(f"the workload did not get ready in {timeout_s:.0f} s: {_tail(log)}")
        time.sleep(0.02)


def _run_pyspy(pyspy: str, work: Path, common: dict, *, runs: int, rate: int, min_support: float,
               timeout_s: float, settle_s: float, symbols_from: list[str] | None, borrow_names: bool) -> dict:
    from lotus.map.donors import Donors
    from lotus.map.pyspy import attribute, read_collapsed
    from lotus.map.symbols import Symbolizer, read_maps_file

    ready, go, maps, raw, log = (work / n for n in ("ready.json", "go", "maps.txt", "pyspy.txt", "workload.log"))
    for p in (ready, go, raw):
        p.unlink(missing_ok=True)
    spec_path, spec = _spec(work, "pyspy", mode="none", runs=runs, ready_file=str(ready), go_file=str(go),
                            maps_file=str(maps), settle_s=settle_s, go_timeout_s=min(timeout_s, 300.0), **common)
    with open(log, "w") as logf:
        proc = subprocess.Popen(B.workload_command(spec_path), stdout=logf, stderr=subprocess.STDOUT)
        try:
            _wait_ready(proc, ready, timeout_s, log)
            if proc.poll() is not None:
                _read_result(spec, log)
                raise B.ToolError(f"the workload exited before profiling: {_tail(log)}")
            spy = subprocess.Popen(B.pyspy_command(pyspy, proc.pid, raw, rate), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            lines: list[str] = []
            started = threading.Event()
            pump = threading.Thread(target=_pump, args=(spy.stdout, lines, started), daemon=True)
            pump.start()
            started.wait(timeout=60)
            if not pump.is_alive():  # py-spy closed its output: it has exited or is exiting
                try:
                    spy.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            if spy.poll() is not None and not raw.exists():
                pump.join(5)
                proc.kill()
                raise B.ToolError(B.explain_pyspy_failure("\n".join(lines), spy.returncode))
            go.write_text("go")
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                spy.kill()
                raise B.ToolError(f"the workload did not finish in {timeout_s:.0f} s (raise --timeout)") from None
            try:
                spy.wait(timeout=120)
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait(timeout=30)
            pump.join(5)
        finally:
            if proc.poll() is None:
                proc.kill()
    result = _read_result(spec, log)
    if not raw.exists():
        raise B.ToolError(B.explain_pyspy_failure("\n".join(lines), spy.returncode))
    donors = Donors(symbols_from, search=borrow_names) if (borrow_names or symbols_from) else None
    symbolizer = Symbolizer(read_maps_file(maps), donors=donors) if maps.exists() else None
    att = attribute(read_collapsed(raw), result["markers"], symbolizer)
    runs_done = {op: len(v["runs"]) for op, v in result["ops"].items()}
    order = [op for op in result["order"] if op not in result["errors"]]
    for op in order:
        if att.samples_per_op.get(op, 0) == 0:
            _log.warning("op %s: no samples under py-spy; raise --seconds or --rate", op)
    meta = {
        "backend": "pyspy",
        "weight_basis": "py-spy samples whose leaf (self) frame is the function / all samples of the op, over all runs",
        "rate_hz": rate,
        "samples": {op: int(att.samples_per_op.get(op, 0)) for op in order},
        "samples_outside_ops": int(att.outside_samples),
        "calls": {op: sum(v["calls"]) for op, v in result["ops"].items()},
        "errors": result["errors"],
        "chain_errors": result.get("chain_errors", {}),
        "func_context": att.context,
        "matched_names": symbolizer.matched if symbolizer is not None else {},
        "modules": att.modules,
        "pyspy_messages": [ln for ln in lines if ln.strip() and "behind in sampling" not in ln][-5:],
    }
    return build_mapping(att.profile, min_support=min_support, op_order=order, runs=runs_done, meta=meta)


def _list_ops(work: Path, common: dict, timeout_s: float) -> list[str]:
    """The ops to measure: the default chain's, or those of the user's pipeline (asked to the workload)."""
    wanted = common.get("ops")
    if common.get("pipeline") is None:
        from lotus.map.ops import DEFAULT_OPS

        unknown = [o for o in wanted or [] if o not in DEFAULT_OPS]
        if unknown:
            raise InputError(f"unknown op(s) {unknown}; the default pipeline has: {', '.join(DEFAULT_OPS)}")
        return [o for o in DEFAULT_OPS if not wanted or o in wanted]
    spec_path, spec = _spec(work, "list", list_only=True, **common)
    log = work / "list.log"
    with open(log, "w") as logf:
        subprocess.run(B.workload_command(spec_path), stdout=logf, stderr=subprocess.STDOUT, timeout=timeout_s,
                       check=False)
    result = _read_result(spec, log)
    unknown = [o for o in wanted or [] if o not in result["available"]]
    if unknown:
        raise InputError(f"unknown op(s) {unknown}; this pipeline has: {', '.join(result['available'])}")
    return [o for o in result["available"] if not wanted or o in wanted]


def _run_checked(cmd: list[str], log: Path, timeout_s: float, what: str, spec: dict | None = None) -> None:
    """Run a profiler command; on failure, the workload's own error (if it wrote one) comes first."""
    with open(log, "a") as logf:
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        try:
            rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, timeout=timeout_s, check=False).returncode
        except subprocess.TimeoutExpired:
            raise B.ToolError(f"{what} did not finish in {timeout_s:.0f} s") from None
    if rc != 0:
        if spec is not None and Path(spec["result_file"]).exists():
            _read_result(spec, log)  # raises for a workload that could not run
        raise B.ToolError(f"{what} failed (exit code {rc}): {_tail(log)}; full log: {log}")


def _collect_one(backend: str, exe: str, work: Path, name: str, spec_path: Path, spec: dict, csv_out: Path,
                 lib: str | None, log: Path, timeout_s: float) -> None:
    """One collection of one op and run, its report written to ``csv_out``."""
    workload = B.workload_command(spec_path)
    if backend == "vtune":
        result_dir = work / "results" / name
        _run_checked(B.vtune_collect_command(exe, result_dir, workload), log, timeout_s, "vtune -collect", spec)
        _run_checked(B.vtune_report_command(exe, result_dir, csv_out), log, timeout_s, "vtune -report")
        return
    out_dir = work / "sessions" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = B.uprof_collect_command(exe, out_dir, workload, start_paused=lib is not None)
    _run_checked(cmd, log, timeout_s, "AMDuProfCLI collect", spec)
    sessions = sorted((d for d in out_dir.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    if not sessions:
        raise B.ToolError(f"AMDuProfCLI collect wrote no session directory under {out_dir}")
    _run_checked(B.uprof_report_command(exe, sessions[-1]), log, timeout_s, "AMDuProfCLI report")
    reports = sorted(sessions[-1].rglob("*.csv"), key=lambda f: f.stat().st_mtime)
    if not reports:
        raise B.ToolError(f"AMDuProfCLI report wrote no CSV under {sessions[-1]}")
    shutil.copyfile(reports[-1], csv_out)


def _run_collector(backend: str, exe: str, work: Path, common: dict, *, runs: int, min_support: float,
                   timeout_s: float) -> dict:
    """VTune / uProf: one collection per op and run, laid out like the study (<dir>/<Op>/<run>.csv), then imported."""
    import pandas as pd

    from lotus.map.mapping import PROFILE_COLUMNS

    ops = _list_ops(work, common, timeout_s)
    lib = B.uprof_controller(exe) if backend == "uprof" else None
    if backend == "uprof" and lib is None:
        _log.warning("libAMDProfileController.so not found (set LOTUS_UPROF_LIB): collecting without --start-paused, "
                     "so warm-up and imports are in the profile")
    layout = work / backend
    errors: dict[str, str] = {}
    log = work / f"{backend}.log"
    for op in ops:
        (layout / op).mkdir(parents=True, exist_ok=True)
        for r in range(1, runs + 1):
            name = f"{op}-{r}"
            spec_path, spec = _spec(work, name, **{**common, "ops": [op]}, runs=1,
                                    mode="itt" if backend == "vtune" else "uprof", uprof_lib=lib)
            _collect_one(backend, exe, work, name, spec_path, spec, layout / op / f"{r}.csv", lib, log, timeout_s)
            result = _read_result(spec, log)
            if op in result["errors"]:
                errors[op] = result["errors"][op]
                shutil.rmtree(layout / op, ignore_errors=True)
                break
    done = [o for o in ops if o not in errors]
    if done:
        profile = import_profiles(layout, backend)
    else:
        profile = pd.DataFrame(columns=list(PROFILE_COLUMNS))
        profile.attrs["runs"] = {}
    meta = {"backend": backend, "errors": errors,
            "weight_basis": "CPU Time (s) of the function / the op's total, over all runs" if backend == "vtune"
            else "first event count (CPU_TIME samples) of the function / the op's total, over all runs"}
    return build_mapping(profile, min_support=min_support, op_order=done, runs=profile.attrs["runs"], meta=meta)
