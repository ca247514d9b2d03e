"""Liveness of the job behind a trace directory, and which directory `lotus top` watches."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from lotus.errors import InputError
from lotus.live import default_root, job_status, local_boot_id, pid_alive, resolve_run_dir
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.live.conftest import rec


def _run_file(d, **kw):
    info = {"version": 1, "command": ["python", "train.py"], "pid": os.getpid(), "hostname": socket.gethostname(),
            "boot_id": local_boot_id(), "start_wall_ns": time.time_ns(), "end_wall_ns": None, "exit_code": None,
            "steps": None, "workers": None}
    info.update(kw)
    (d / "lotus-run.json").write_text(json.dumps(info))


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(_dead_pid())
    assert not pid_alive(None) and not pid_alive(0)
    assert not pid_alive(os.getpid(), started_by_wall_ns=time.time_ns() - 3600 * 10**9)  # a reused pid


def test_run_file_rules(tmp_path):
    _run_file(tmp_path)
    st = job_status(tmp_path)
    assert st.live and st.source == "lotus-run.json" and st.pid == os.getpid()
    _run_file(tmp_path, exit_code=3, end_wall_ns=time.time_ns())
    st = job_status(tmp_path)
    assert not st.live and st.exit_code == 3 and "exit code 3" in st.reason
    _run_file(tmp_path, pid=_dead_pid())
    st = job_status(tmp_path)
    assert not st.live and "gone" in st.reason


def test_run_file_of_another_host_uses_file_growth(tmp_path):
    _run_file(tmp_path, boot_id="another-boot", hostname="elsewhere")
    w = TraceWriter(tmp_path, "main")
    w.flush()
    assert job_status(tmp_path).live  # the file was just written
    old = time.time() - 60
    os.utime(w.path, (old, old))
    assert not job_status(tmp_path).live


def test_run_file_in_a_parent(tmp_path):
    sub = tmp_path / "b256"
    sub.mkdir()
    _run_file(tmp_path, exit_code=0)
    assert job_status(sub, root=tmp_path).exit_code == 0
    assert job_status(sub).source != "lotus-run.json"  # not above the root


def test_trace_files_rules(tmp_path, now_mono):
    assert not job_status(tmp_path).live and job_status(tmp_path).reason == "no trace files"
    w = TraceWriter(tmp_path, "main")  # this process, still writing
    rec(w, S.EV_EPOCH_START, now_mono)
    w.flush()
    st = job_status(tmp_path)
    assert st.live and st.pid == os.getpid()
    w.close()
    st = job_status(tmp_path)
    assert not st.live and "closed" in st.reason


def test_killed_process(tmp_path):
    code = ("import sys, os\nfrom lotus.trace.writer import TraceWriter\n"
            "w = TraceWriter(sys.argv[1], 'main')\nw.buf += w.pack(12, 0, 0, 1, 0, -1, -1, 0)\n"
            "w.flush()\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    st = job_status(tmp_path)
    assert not st.live and "killed" in st.reason


def test_resolve_run_dir(tmp_path):
    with pytest.raises(InputError, match="no such directory"):
        resolve_run_dir(tmp_path / "missing")
    assert resolve_run_dir(tmp_path) == tmp_path  # nothing below: itself
    for name in ("b128", "b256"):
        (tmp_path / name).mkdir()
        TraceWriter(tmp_path / name, "main").close()
        time.sleep(0.02)
    assert resolve_run_dir(tmp_path) == tmp_path / "b256"  # the newest
    old = time.time() - 60
    for p in (tmp_path / "b256").iterdir():
        os.utime(p, (old, old))
    assert resolve_run_dir(tmp_path) == tmp_path / "b128"
    assert resolve_run_dir(tmp_path / "b128") == tmp_path / "b128"


def test_default_root(tmp_path):
    assert default_root(tmp_path) == tmp_path
    runs = tmp_path / "lotus-runs"
    (runs / "train-1").mkdir(parents=True)
    time.sleep(0.02)
    (runs / "train-2").mkdir()
    assert default_root(tmp_path) == runs / "train-2"
