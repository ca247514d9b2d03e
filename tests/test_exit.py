"""The ``lotus`` program leaves without the interpreter's teardown (lotus._exit), losing nothing a normal exit gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PRELUDE = ("import atexit, sys, tempfile, threading, time\nMARK = sys.argv[1]\n"
           "class Late:\n"
           "    def __del__(self, _open=open, _mark=MARK):  # builtins may be gone by then\n"
           "        _open(_mark + '.teardown', 'w').write('x')\n"
           "late = Late()\n")


def _program(tmp_path: Path, body: str, args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    marker = tmp_path / "m"
    code = PRELUDE + body + f"\nsys.argv = ['lotus', *{args!r}]\nfrom lotus.cli import main\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, str(marker)], check=False, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_leaves_without_teardown_but_runs_atexit_handlers_and_finalizers(tmp_path):
    body = ("d = tempfile.TemporaryDirectory()\nopen(d.name + '/x', 'w').write('x')\nprint(d.name, flush=True)\n"
            "atexit.register(lambda: open(MARK + '.atexit', 'w').write('x'))\n")
    r = _program(tmp_path, body, ["--version"])
    assert r.returncode == 0, r.stderr
    temp, version = r.stdout.splitlines()
    assert version.startswith("lotus, version")
    assert (tmp_path / "m.atexit").exists()  # the handlers ran
    assert not Path(temp).exists()  # weakref.finalize's temporary directory removed
    assert not (tmp_path / "m.teardown").exists()  # the interpreter's teardown did not run: the fast path was taken


def test_slow_exit_variable_keeps_the_normal_exit(tmp_path):
    r = _program(tmp_path, "", ["--version"], env={"LOTUS_SLOW_EXIT": "1"})
    assert r.returncode == 0 and "lotus, version" in r.stdout
    assert (tmp_path / "m.teardown").exists()


def test_a_running_thread_that_is_not_a_daemon_gets_the_normal_exit(tmp_path):
    body = ("def late_write():\n    time.sleep(0.3)\n    open(MARK + '.thread', 'w').write('x')\n"
            "threading.Thread(target=late_write).start()\n")
    r = _program(tmp_path, body, ["--version"])
    assert r.returncode == 0
    assert (tmp_path / "m.thread").exists()  # the interpreter waited for it, as it always does
    assert (tmp_path / "m.teardown").exists()


def test_exit_codes_and_messages_are_kept(tmp_path):
    r = _program(tmp_path, "", ["analyze", "verdict", "-d", str(tmp_path / "absent")])
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "absent" in r.stderr
    r = _program(tmp_path, "", ["no-such-command"])
    assert r.returncode == 2 and "no-such-command" in r.stderr


@pytest.mark.timeout(180)
def test_a_command_output_written_whole_through_a_pipe(tmp_path):
    from lotus.trace.synthetic import spec_for_events, write_native

    run = tmp_path / "run"
    write_native(run, spec_for_events(50_000, "lotus", n_workers=2, batch_size=8, epochs=2))
    outs = []
    for env in ({}, {"LOTUS_SLOW_EXIT": "1"}):
        r = subprocess.run([sys.executable, "-m", "lotus", "analyze", "verdict", "-d", str(run), "--json"],
                           check=False, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1] and outs[0]["configs"]
