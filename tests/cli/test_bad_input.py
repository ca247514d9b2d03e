"""Bad input: one-line messages naming file:line, the rest analysed, usage errors exit 2, no tracebacks."""

from __future__ import annotations

import shutil

import pytest

from tests.cli.conftest import run

COMMANDS = [["analyze", "stats"], ["analyze", "wait"], ["analyze", "verdict"], ["info"], ["export", "--out", "X"],
            ["plot", "--out-dir", "X", "--format", "png"], ["report", "--out", "X/r.html", "--no-figures"]]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _one_line_errors(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if line]
    assert all(line.startswith("lotus: ") for line in lines), stderr
    return lines


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0] + (c[1] if c[0] == "analyze" else ""))
def test_missing_and_empty_directories(cmd, tmp_path):
    def args(d):
        return [c.replace("X", str(tmp_path / "out")) for c in cmd] + ["--data-dir", d]

    res = run(*args(tmp_path / "nope"), ok=False)
    assert res.exit_code == 1
    assert _one_line_errors(res.stderr) == [f"lotus: error: {tmp_path / 'nope'}: no such file or directory"]
    (tmp_path / "empty").mkdir()
    res = run(*args(tmp_path / "empty"), ok=False)
    assert res.exit_code == 1 and len(_one_line_errors(res.stderr)) == 1
    assert "no trace files" in res.stderr


def test_viz_and_diff_on_missing_input(tmp_path):
    res = run("viz", "-d", tmp_path / "nope", "-o", tmp_path / "t.json", ok=False)
    assert res.exit_code == 1 and "no such file" in res.stderr
    res = run("diff", tmp_path / "a", tmp_path / "b", ok=False)
    assert res.exit_code == 1 and len(_one_line_errors(res.stderr)) == 1


def test_only_worker_files(reference_dir, tmp_path):
    d = tmp_path / "workers"
    d.mkdir()
    for p in (reference_dir / "traces" / "b128_gpu4").glob("*_worker_pid_*"):
        shutil.copy(p, d)
    res = run("analyze", "verdict", "-d", d)
    assert "no main-process file" in res.stderr and "UNKNOWN" in res.output and "slowest op: load" in res.output
    res = run("analyze", "stats", "-d", d)
    assert "RandomResizedCrop" in res.output
    res = run("analyze", "wait", "-d", d)
    assert "wait unknown" in res.output


def test_truncated_last_line_names_file_and_line(reference_dir, tmp_path):
    d = _copy(reference_dir / "traces" / "b128_gpu4", tmp_path / "crashed")
    f = d / "custom_log_worker_pid_93199"
    f.write_bytes(f.read_bytes()[:-9])  # cut in the middle of the last number
    res = run("analyze", "stats", "-d", d, "--json")
    warn = [line for line in res.stderr.splitlines() if "truncated" in line]
    assert warn == [f"lotus: warning: {f}:3080: last line has no newline (truncated by a crash?); dropped"]
    assert '"batch_preprocessing_ms"' in res.stdout


def test_non_numeric_fields_and_unknown_names(reference_dir, tmp_path):
    d = _copy(reference_dir / "traces" / "b128_gpu4", tmp_path / "bad")
    f = d / "custom_log_worker_pid_93231"
    lines = f.read_text().splitlines()
    lines[4] = "SLoader,12x4,55"
    lines[8] = "SLoader,1697409315299326911"
    lines[6] = "Bogus,1697409315299326911,1000"
    f.write_text("\n".join(lines) + "\n")
    res = run("analyze", "stats", "-d", d)
    err = _one_line_errors(res.stderr)
    assert f"lotus: warning: {f}:5: START_NS '12x4' is not an integer; line skipped" in err
    assert f"lotus: warning: {f}:9: expected NAME,START_NS,DUR_NS, got 2 fields; line skipped" in err
    assert any(f"{f}:" in e and "unknown event name 'Bogus'" in e for e in err)
    assert "collate" in res.output  # the rest is analysed


def test_native_damage_is_salvaged(synth_native, tmp_path):
    d = _copy(synth_native, tmp_path / "damaged")
    worker = sorted(d.glob("*-w0-*"))[0]
    raw = worker.read_bytes()
    worker.write_bytes(raw[:-48] + b"\x01\x02\x03")  # killed: no end record, a torn last record
    (d / "lotus-r0-w7-p99.lotustrace").write_bytes(b"garbage")
    res = run("info", "-d", d)
    err = _one_line_errors(res.stderr)
    assert any("lotus-r0-w7-p99.lotustrace: empty or truncated trace file" in e and "skipped" in e for e in err)
    assert any(f"{worker}: record" in e and "truncated" in e for e in err)
    assert "NO" in res.output and "without an end record" in res.output
    assert "INPUT-BOUND" in run("analyze", "verdict", "-d", d).output.upper()


def test_a_broken_run_among_good_ones_is_skipped(synth_native, tmp_path):
    root = tmp_path / "runs"
    _copy(synth_native, root / "good")
    (root / "broken").mkdir()
    (root / "broken" / "lotus-r0-main-p1.lotustrace").write_bytes(b"LOTUSTR1")
    res = run("analyze", "stats", "-d", root)
    assert "good" in res.output
    assert any("broken" in e and "skipped" in e for e in _one_line_errors(res.stderr))


def test_unwritable_outputs_are_one_line_errors(synth_native, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["plot", "--out-dir", blocker / "figs", "--format", "png"], ["report", "-o", blocker / "r.html"],
                 ["viz", "-o", blocker / "t.json"], ["export", "-o", blocker / "x"],
                 ["analyze", "stats", "-o", blocker / "s.csv"]):
        res = run(*args, "-d", synth_native, ok=False)
        assert res.exit_code == 1, args
        err = _one_line_errors(res.stderr)
        assert err[-1].startswith("lotus: error: cannot write ") and str(blocker) in err[-1], err
    res = run("plot", "-d", synth_native, "--out-dir", blocker, ok=False)  # a file where a directory goes: usage
    assert res.exit_code == 2
