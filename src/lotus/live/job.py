"""Is the job behind a trace directory still running? Which directory is the run to watch?

Liveness, in order:

1. ``lotus-run.json`` (written by ``lotus run`` in the trace directory, or in a parent of it): the job
   ended when its ``exit_code`` is set. Otherwise, on the host that wrote it (same ``boot_id``), it is
   live while its ``pid`` runs; on another host, while its trace files grow (rule 3).
2. Without that file (a job traced through ``$LOTUS_TRACE_DIR``): live while some main-process file
   has no end record and its process (header ``pid``, same ``boot_id``) runs. Not live when every
   main-process file is closed (end record), or when the open ones are all of this host and their
   processes are gone (killed).
3. Otherwise (open main-process files of another host, whose processes cannot be checked from here,
   or only worker files): live while some trace file grew within the last ``GROW_S`` seconds.

A pid that runs but started after the trace (or the run file) was created is a reused pid: not the job.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lotus.errors import InputError
from lotus.trace import schema as S

_log = logging.getLogger("lotus.live")
RUN_FILE = "lotus-run.json"
RUNS_DIR = "lotus-runs"
GROW_S = 5.0


def local_boot_id() -> str:
    """This host's boot id (the clock domain of ``time.monotonic_ns``), as the trace writer records it."""
    from lotus.trace.header import boot_id

    return boot_id()


def process_start_wall_ns(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie: it has exited
        return -1
    ticks = os.sysconf("SC_CLK_TCK")
    return btime * 1_000_000_000 + int(fields[19]) * 1_000_000_000 // ticks


def pid_alive(pid: int | None, started_by_wall_ns: int | None = None) -> bool:
    """Whether ``pid`` runs on this host (and, where known, started before ``started_by_wall_ns``)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    start = process_start_wall_ns(pid)
    if start == -1:
        return False
    # /proc times have a 1 s (btime) + 1 tick resolution: allow 2 s
    return not (start is not None and started_by_wall_ns is not None and start > started_by_wall_ns + 2_000_000_000)


@dataclass
class JobStatus:
    """Liveness of the job writing a trace directory, with the reason in words."""

    live: bool
    reason: str
    source: str  # "lotus-run.json" | "trace files" | "none"
    pid: int | None = None
    exit_code: int | None = None
    command: list | None = None
    run_file: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def find_run_file(run_dir: Path, root: Path | None = None) -> Path | None:
    """``lotus-run.json`` of ``run_dir``, or of its parents up to ``root`` (inclusive)."""
    d = run_dir.resolve()
    stop = (root or run_dir).resolve()
    while True:
        p = d / RUN_FILE
        if p.is_file():
            return p
        if d in (stop, d.parent) or stop not in d.parents:
            return None
        d = d.parent


def _main_files(run_dir: Path) -> list[tuple[Path, dict, bool]]:
    """(path, header, closed cleanly) of the main-process files of ``run_dir``."""
    from lotus.trace.native import read_header

    out = []
    for p in sorted(run_dir.glob(f"*-main-*{S.FILE_SUFFIX}")):
        try:
            header, offset = read_header(p)
            size = p.stat().st_size
        except (InputError, OSError):
            continue
        last = offset + ((size - offset) // S.RECORD_SIZE - 1) * S.RECORD_SIZE
        ended = False
        if last >= offset:
            with open(p, "rb") as f:
                f.seek(last)
                ended = S.RECORD.unpack(f.read(S.RECORD_SIZE))[0] == S.CTRL_END
        out.append((p, header, ended))
    return out


def _grew_within(run_dir: Path, seconds: float) -> float | None:
    """Seconds since the newest trace file of ``run_dir`` was written, if within ``seconds``."""
    try:
        newest = max((p.stat().st_mtime for p in run_dir.glob(f"*{S.FILE_SUFFIX}")), default=None)
    except OSError:
        newest = None
    if newest is None:
        return None
    age = max(0.0, time.time() - newest)
    return age if age <= seconds else None


def job_status(run_dir: str | os.PathLike, *, root: str | os.PathLike | None = None,
               grow_s: float = GROW_S) -> JobStatus:
    """Whether the job writing ``run_dir`` is still running (see the module doc for the rules)."""
    run_dir = Path(run_dir)
    boot = local_boot_id()
    run_file = find_run_file(run_dir, Path(root) if root is not None else None)
    if run_file is not None:
        try:
            info = json.loads(run_file.read_text())
        except (OSError, ValueError) as exc:
            _log.warning("%s: unreadable (%s); deciding liveness from the trace files", run_file, exc)
        else:
            pid, code, cmd = info.get("pid"), info.get("exit_code"), info.get("command")
            common = {"source": RUN_FILE, "pid": pid, "exit_code": code, "command": cmd, "run_file": str(run_file)}
            if code is not None:
                return JobStatus(False, f"job ended with exit code {code}", **common)
            if (info.get("boot_id") == boot) if info.get("boot_id") else (info.get("hostname") == socket.gethostname()):
                try:  # the file is first written once the job's process exists: it started before
                    written = run_file.stat().st_mtime_ns
                except OSError:
                    written = None
                if pid_alive(pid, written):
                    return JobStatus(True, f"job process {pid} is running", **common)
                return JobStatus(False, f"job process {pid} is gone without an exit code (killed?)", **common)
            age = _grew_within(run_dir, grow_s)
            if age is not None:
                return JobStatus(True, f"job on {info.get('hostname')}: trace files grew {age:.0f} s ago", **common)
            return JobStatus(False, f"job on {info.get('hostname')}: trace files unchanged for over {grow_s:.0f} s",
                             **common)
    mains = _main_files(run_dir)
    open_mains = [h for _, h, ended in mains if not ended]
    local_open = [h for h in open_mains if h.get("boot_id") == boot]
    for h in local_open:
        if pid_alive(h.get("pid"), h.get("anchor_wall_ns")):
            return JobStatus(True, f"process {h.get('pid')} is writing its trace", "trace files", pid=h.get("pid"))
    if mains and not open_mains:
        return JobStatus(False, "all main-process trace files are closed", "trace files")
    if open_mains and len(local_open) == len(open_mains):
        pids = ", ".join(str(h.get("pid")) for h in local_open)
        return JobStatus(False, f"process {pids} is gone without closing its trace (killed?)", "trace files")
    # processes of another host, or only worker files: the files must be growing
    age = _grew_within(run_dir, grow_s)
    if age is not None:
        return JobStatus(True, f"trace files grew {age:.0f} s ago", "trace files")
    if not any(run_dir.glob(f"*{S.FILE_SUFFIX}")):
        return JobStatus(False, "no trace files", "none")
    what = "trace files of another host" if open_mains else "only worker files,"
    return JobStatus(False, f"{what} unchanged for over {grow_s:.0f} s", "trace files")


# -- which directory ---------------------------------------------------------------------------
def _has_traces(d: Path) -> bool:
    try:
        with os.scandir(d) as it:
            return any(e.name.endswith(S.FILE_SUFFIX) or e.name == RUN_FILE for e in it)
    except OSError:
        return False


def _newest_mtime(d: Path) -> float:
    try:
        with os.scandir(d) as it:
            times = [e.stat().st_mtime for e in it if e.is_file()]
    except OSError:
        return 0.0
    return max(times, default=d.stat().st_mtime)


def default_root(cwd: Path | None = None) -> Path:
    """The most recently modified directory under ``./lotus-runs/``, else the current directory."""
    cwd = cwd or Path.cwd()
    runs = cwd / RUNS_DIR
    if runs.is_dir():
        dirs = [d for d in runs.iterdir() if d.is_dir()]
        if dirs:
            return max(dirs, key=lambda d: d.stat().st_mtime)
    return cwd


def resolve_run_dir(root: Path) -> Path:
    """The trace directory to watch: ``root`` when it holds trace files (or ``lotus-run.json``), else
    the subdirectory (one or two levels down) whose files were written last; ``root`` when none."""
    if not root.exists():
        raise InputError("no such directory", root)
    if not root.is_dir():
        raise InputError("not a directory (give the run's trace directory)", root)
    if _has_traces(root):
        return root
    found = [d for d in root.iterdir() if d.is_dir() and _has_traces(d)]
    if not found:
        found = [d2 for d in root.iterdir() if d.is_dir() for d2 in d.iterdir() if d2.is_dir() and _has_traces(d2)]
    return max(found, key=_newest_mtime) if found else root
