"""`lotus top` through click: --once --json, the "no live job" line, bad input."""

from __future__ import annotations

import json
import os
import time

from click.testing import CliRunner

from lotus.cli import cli
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter
from tests.live.conftest import SEC, rec, write_known_run


def _top(*args):
    result = CliRunner().invoke(cli, ["top", *map(str, args)])
    assert "Traceback" not in result.output + result.stderr
    return result


def test_once_json_of_a_finished_run_is_its_last_snapshot(tmp_path, now_mono):
    write_known_run(tmp_path, now_mono - 30 * SEC)
    r = _top(tmp_path, "--once", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    snap = json.loads(r.stdout)
    assert snap["live"] is False and snap["run_dir"] == str(tmp_path)
    assert snap["samples_per_s"] == 320  # the last 10 s of the run, not the silence since
    assert snap["loaders"][0]["workers"][0]["busy_share"] == 0.3
    assert snap["job"]["reason"] == "all main-process trace files are closed"
    assert "no live job" in r.stderr
    for key in ("version", "now_ns", "window_s", "files", "loaders", "job", "wall_ns"):
        assert key in snap


def test_once_table(tmp_path, now_mono):
    write_known_run(tmp_path, now_mono - 30 * SEC)
    r = _top(tmp_path, "--once")
    assert r.exit_code == 0
    for word in ("samples/s", "wait", "busy", "slowest op", "320", "20%", "Resize"):
        assert word in r.stdout


def test_no_live_job_is_one_line_and_exit_0(tmp_path, now_mono):
    write_known_run(tmp_path, now_mono - 30 * SEC)
    r = _top(tmp_path)
    assert r.exit_code == 0
    assert r.stdout.strip().count("\n") == 0
    assert r.stdout.startswith(f"lotus top: no live job in {tmp_path} (")
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _top(empty)
    assert r.exit_code == 0 and "no live job" in r.stdout and "no trace files" in r.stdout


def test_missing_directory_is_an_error(tmp_path):
    r = _top(tmp_path / "nope")
    assert r.exit_code == 1
    assert r.stderr.strip() == f"lotus: error: {tmp_path / 'nope'}: no such directory"


def test_default_is_the_newest_run_under_lotus_runs(tmp_path, now_mono, monkeypatch):
    runs = tmp_path / "lotus-runs"
    write_known_run(runs / "train-old", now_mono - 30 * SEC)
    time.sleep(0.02)
    w = TraceWriter(runs / "train-new", "main")
    w.define_loader(0, {"name": "newest"})
    rec(w, S.EV_EPOCH_START, now_mono)
    w.close()
    monkeypatch.chdir(tmp_path)
    r = _top("--once", "--json")
    snap = json.loads(r.stdout)
    assert snap["run_dir"].endswith("train-new") and snap["loaders"][0]["name"] == "newest"


def test_follows_a_live_job_until_it_ends_json_lines(tmp_path, now_mono):
    """A job in this process (pid alive, file open): lines per refresh; closing the file ends it."""
    import threading

    w = TraceWriter(tmp_path, "main")
    w.define_loader(0, {"name": "train", "batch_size": 4})
    rec(w, S.EV_EPOCH_START, time.monotonic_ns())
    w.flush()

    def job():
        for b in range(20):
            rec(w, S.EV_CONSUMED, time.monotonic_ns(), batch=b)
            w.flush()
            time.sleep(0.05)
        w.close()

    t = threading.Thread(target=job)
    t.start()
    r = _top(tmp_path, "--json", "--interval", "0.2")
    t.join()
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) >= 2 and lines[0]["live"] and not lines[-1]["live"]
    assert lines[-1]["loaders"][0]["batches_per_s"] > 0
    assert r.stderr.strip().startswith("lotus top: job ended (")
    assert os.path.exists(w.path)
