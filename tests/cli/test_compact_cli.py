"""lotus compact: rotated parts -> one compressed file per process; a full disk keeps the originals."""

from __future__ import annotations

import errno
import json

import pandas as pd

from tests.cli.conftest import run
from tests.trace.test_rotation import frame, write


def test_compact_stitches_and_compresses(tmp_path):
    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    write(tmp_path / "one")
    assert len(list(d.iterdir())) >= 5
    r = run("compact", d)
    assert "5 file(s)" not in r.output and "1 process(es), 1 compacted" in r.output and "bytes per record" in r.output
    files = list(d.iterdir())
    assert len(files) == 1 and files[0].name.endswith(".lotustrace.zst") and "part" not in files[0].name
    a, ev = frame(d)
    pd.testing.assert_frame_equal(frame(tmp_path / "one")[0], a)
    assert [f["clean_close"] for f in ev.attrs["files"]] == [True]
    assert "0 compacted" in run("compact", d).output  # once is enough


def test_compacted_synthetic_run_same_verdict(synth_epochs, tmp_path):
    import shutil

    d = tmp_path / "c"
    shutil.copytree(synth_epochs, d)
    def verdict(path):
        (v,) = json.loads(run("analyze", "verdict", "--json", "-d", path).output)["configs"].values()
        return v

    before = verdict(synth_epochs)
    run("compact", d)
    assert all(p.name.endswith(".zst") for p in d.iterdir())
    assert verdict(d) == before


def test_full_disk_keeps_the_originals(tmp_path, monkeypatch):
    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    def full(parts, out):
        out.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lotus.trace.compact._write_process", full)
    r = run("compact", d, ok=False)
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and "original files are kept" in lines[0]
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # no temporary directory either


def test_compact_refuses_original_logs(synth_original):
    r = run("compact", synth_original, ok=False)
    assert r.exit_code == 1 and "only lotus trace files" in r.stderr


def test_leftover_temporary_directory_is_not_a_run(tmp_path):
    from lotus.trace.discover import find_runs

    d = tmp_path / "rot"
    write(d, rotate_bytes=2048)
    left = d / ".lotus-compact.tmp"  # what a killed compaction leaves
    left.mkdir()
    (left / "lotus-r0-w0-p1.lotustrace.zst").write_bytes(b"half")
    assert [r.path for r in find_runs(tmp_path)] == [d]
    run("compact", d)
    assert not left.exists()
