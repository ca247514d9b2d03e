"""A throw-away single-node Slurm for tests: munged, slurmctld and slurmd started as root in a temp dir.

    python tests/submit/slurm_cluster.py start /tmp/lotus-slurm   # prints: export SLURM_CONF=...
    python tests/submit/slurm_cluster.py stop /tmp/lotus-slurm

Needs Debian's ``slurm-wlm`` and ``munge`` (``apt-get install -y slurm-wlm munge``) and root. Everything
(munge key and socket, slurm.conf, state, spool, logs, pid files) lives in the directory; the daemons
listen on free ports, so a system Slurm, if any, is untouched. Only the processes whose pids the pid files
name are stopped. :func:`why_not` says why Slurm cannot run here (tests skip with that reason).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmNotAvailable(RuntimeError):
    pass


def why_not() -> str | None:
    """None when a local Slurm can be tried here, else why not."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    missing = [b for b in (*DAEMONS, "sbatch", "squeue", "scancel", "sinfo") if shutil.which(b) is None
               and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; apt-get install -y slurm-wlm munge)"
    if os.geteuid() != 0:
        return "not root (slurmd must run as root)"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit not installed"
    return None


def _bin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(int(line.split()[1]) / 1024 * 0.8)
    except OSError:
        pass
    return 1024


class LocalSlurm:
    """One node (this host, all its CPUs), one partition ``lotus`` (default)."""

    partition = "lotus"

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _write(self) -> None:
        r = self.root
        for d in ("state", "spool"):
            (r / d).mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.conf.write_text(f"""ClusterName=lotustest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_mem_mb()} State=UNKNOWN
PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _run(self, cmd: list[str]) -> None:
        env = {**os.environ, **self.env}
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise SlurmNotAvailable(f"{Path(cmd[0]).name} failed (exit {r.returncode}): "
                                    f"{(r.stderr or r.stdout).strip()[-300:]} {self._logs()}")

    def _logs(self) -> str:
        tails = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            p = self.root / name
            if p.exists():
                lines = [ln for ln in p.read_text(errors="replace").splitlines() if "error" in ln.lower()][-2:]
                if lines:
                    tails.append(f"[{name}] " + " | ".join(lines))
        return " ".join(tails)

    def start(self, timeout_s: float = 40.0) -> LocalSlurm:
        """Start the three daemons and wait until the node is idle. Raises SlurmNotAvailable."""
        reason = why_not()
        if reason:
            raise SlurmNotAvailable(reason)
        self.root.mkdir(parents=True, exist_ok=True)
        self._write()
        r = self.root
        try:
            self._run([_bin("munged"), "-f", f"--socket={r}/munge.sock", f"--key-file={r}/munge.key",
                       f"--log-file={r}/munged.log", f"--pid-file={r}/munged.pid", f"--seed-file={r}/munged.seed"])
            self._run([_bin("slurmctld"), "-f", str(self.conf), "-i"])
            self._run([_bin("slurmd"), "-f", str(self.conf), "-N", self.node])
            deadline = time.monotonic() + timeout_s
            state = ""
            while time.monotonic() < deadline:
                out = subprocess.run(["sinfo", "-h", "-o", "%T"], env={**os.environ, **self.env},
                                     capture_output=True, text=True, timeout=30, check=False)
                state = out.stdout.strip()
                if state in ("idle", "mixed", "allocated"):
                    return self
                time.sleep(0.5)
            raise SlurmNotAvailable(f"the node did not come up (state {state!r}) {self._logs()}")
        except (SlurmNotAvailable, OSError, subprocess.TimeoutExpired) as exc:
            self.stop()
            raise SlurmNotAvailable(str(exc)) from None

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.root / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _steps_left(self) -> list[Path]:
        """The job steps slurmd still runs (their sockets in the spool directory)."""
        return [p for p in (self.root / "spool").glob(f"{self.node}_*") if p.is_socket()]

    def stop(self, wait_steps_s: float = 30.0) -> None:
        """Cancel this cluster's jobs, let their steps end (slurmstepd reports to slurmd), then stop the
        daemons named by the pid files (SIGTERM, then SIGKILL)."""
        if self.conf.exists() and shutil.which("scancel"):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(["scancel", "--full", "--quiet", f"--partition={self.partition}"],
                               env={**os.environ, **self.env}, capture_output=True, timeout=30, check=False)
            deadline = time.monotonic() + wait_steps_s
            while self._steps_left() and time.monotonic() < deadline and _alive(self._pid("slurmd") or 0):
                time.sleep(0.2)
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            pid = self._pid(name)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                pid_file.unlink()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: slurm_cluster.py start|stop DIR", file=sys.stderr)
        return 2
    cluster = LocalSlurm(argv[1])
    if argv[0] == "stop":
        cluster.stop()
        return 0
    try:
        cluster.start()
    except SlurmNotAvailable as exc:
        print(f"Slurm not started: {exc}", file=sys.stderr)
        return 1
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
