"""The profilers ``lotus map run`` drives: finding them, their command lines, and their failures in words.

* ``pyspy``: ``py-spy record --native --format raw --pid PID`` attached after warm-up.
* ``vtune``: ``vtune -collect hotspots -start-paused`` around the workload (ITT resume/pause and a
  task per op inside it), then ``vtune -report hotspots -format csv``.
* ``uprof``: ``AMDuProfCLI collect --config tbp --start-paused`` (resume/pause through
  ``libAMDProfileController.so``), then ``AMDuProfCLI report``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lotus.errors import LotusError

BACKENDS = ("pyspy", "vtune", "uprof")


class ToolError(LotusError):
    """A profiler is missing, not permitted, or failed; the message says how to fix it."""


def workload_command(spec_path: str | os.PathLike, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "lotus.map._workload", str(spec_path)]


def find_pyspy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else None


def find_vtune() -> str | None:
    return shutil.which("vtune")


def find_uprof() -> str | None:
    return shutil.which("AMDuProfCLI")


def auto_backend() -> str:
    """``vtune`` where it is installed, else ``pyspy``."""
    return "vtune" if find_vtune() else "pyspy"


def require(backend: str) -> str:
    """The executable of ``backend``, or a :class:`ToolError` saying how to get it."""
    if backend == "pyspy":
        exe = find_pyspy()
        if exe is None:
            raise ToolError("py-spy not found: install it with `pip install py-spy` (a dependency of lotus) "
                            "or put it on PATH")
        return exe
    if backend == "vtune":
        exe = find_vtune()
        if exe is None:
            raise ToolError("Intel VTune Profiler not found (no `vtune` on PATH): install oneAPI VTune and "
                            "`source /opt/intel/oneapi/vtune/latest/env/vars.sh`, or use --backend pyspy")
        return exe
    if backend == "uprof":
        exe = find_uprof()
        if exe is None:
            raise ToolError("AMD uProf not found (no `AMDuProfCLI` on PATH): install AMD uProf and add "
                            "/opt/AMDuProf_*/bin to PATH, or use --backend pyspy")
        return exe
    raise ToolError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def pyspy_command(pyspy: str, pid: int, out: str | os.PathLike, rate: int) -> list[str]:
    return [pyspy, "record", "--native", "--format", "raw", "--rate", str(int(rate)), "--pid", str(int(pid)),
            "-o", str(out)]


def explain_pyspy_failure(stderr: str, rc: int | None) -> str:
    """A one-line reason and fix for a py-spy that could not sample."""
    low = stderr.lower()
    tail = " ".join(stderr.strip().splitlines()[-2:])[:300]
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low:
        return ("py-spy was not permitted to attach to the workload (ptrace): run lotus as root (sudo), or allow "
                "ptrace with `sudo sysctl kernel.yama.ptrace_scope=0`; in Docker add `--cap-add SYS_PTRACE`. "
                f"py-spy said: {tail}")
    if "native" in low and ("not supported" in low or "unsupported" in low):
        return f"this py-spy cannot sample native stacks here (--native unsupported): {tail}"
    return f"py-spy failed (exit code {rc}): {tail or 'no output'}"


def vtune_collect_command(vtune: str, result_dir: str | os.PathLike, workload: list[str]) -> list[str]:
    return [vtune, "-collect", "hotspots", "-start-paused", "-result-dir", str(result_dir), "-quiet", "--", *workload]


def vtune_report_command(vtune: str, result_dir: str | os.PathLike, csv_out: str | os.PathLike) -> list[str]:
    return [vtune, "-report", "hotspots", "-result-dir", str(result_dir), "-format", "csv",
            "-csv-delimiter", "comma", "-report-output", str(csv_out)]


def uprof_controller(cli: str | None) -> str | None:
    """``libAMDProfileController.so`` next to an AMDuProfCLI (``<install>/lib/x64``), or $LOTUS_UPROF_LIB."""
    env = os.environ.get("LOTUS_UPROF_LIB")
    if env and Path(env).exists():
        return env
    if not cli:
        return None
    root = Path(os.path.realpath(cli)).parent.parent
    for cand in (root / "lib" / "x64" / "libAMDProfileController.so", root / "lib" / "libAMDProfileController.so"):
        if cand.exists():
            return str(cand)
    return None


def uprof_collect_command(cli: str, out_dir: str | os.PathLike, workload: list[str], *,
                          start_paused: bool) -> list[str]:
    cmd = [cli, "collect", "--config", "tbp"]
    if start_paused:
        cmd.append("--start-paused")
    return [*cmd, "-o", str(out_dir), *workload]


def uprof_report_command(cli: str, session_dir: str | os.PathLike) -> list[str]:
    return [cli, "report", "-i", str(session_dir)]
