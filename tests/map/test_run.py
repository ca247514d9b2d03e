"""`lotus map run`: the isolation workload, py-spy for real, and VTune / uProf driven through stand-ins."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lotus.cli import cli
from lotus.map import backends as B
from lotus.map._workload import run as run_workload
from lotus.map.ops import DEFAULT_OPS, build_ops, transforms_of

HERE = Path(__file__).resolve().parent
PIPELINE = f"{HERE / 'pipeline_fixture.py'}:PIPELINE"
# Decode functions of libjpeg(-turbo) (names from a libjpeg-turbo build with symbols).
JPEG_DECODE = {"decode_mcu", "decode_mcu_fast", "decompress_onepass", "jpeg_fill_bit_buffer", "jpeg_huff_decode",
               "jpeg_idct_islow", "jsimd_idct_islow_avx2", "jsimd_idct_islow_sse2", "ycc_rgb_convert",
               "jsimd_ycc_rgb_convert_avx2", "jsimd_ycc_extrgb_convert_avx2", "jsimd_ycc_extrgbx_convert_avx2",
               "jsimd_h2v2_fancy_upsample_avx2", "jsimd_h2v1_fancy_upsample_avx2", "sep_upsample"}


def _jpeg_names_expected(modules: dict[str, str]) -> bool:
    from lotus.map.donors import Donors
    from lotus.map.elf import read_elf

    jpeg = [p for m, p in modules.items() if m.startswith("libjpeg")]
    return bool(jpeg) and (read_elf(jpeg[0]).has_symtab or bool(Donors().candidates(jpeg[0])))


def _stub(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_build_ops_default_and_user_pipeline():
    ops = build_ops(None, batch_size=4)
    assert tuple(op.name for op in ops) == DEFAULT_OPS
    ops = build_ops(PIPELINE, batch_size=4)
    assert [op.name for op in ops] == ["Loader", "RandomResizedCrop", "Boom", "ToTensor", "Collation"]
    assert transforms_of([len, abs]) == [len, abs]
    from lotus.errors import InputError

    with pytest.raises(InputError, match="expected a Compose"):
        build_ops(f"{HERE / 'pipeline_fixture.py'}:NOT_A_PIPELINE")
    with pytest.raises(InputError, match="has no attribute 'NOPE'"):
        build_ops(f"{HERE / 'pipeline_fixture.py'}:NOPE")
    with pytest.raises(InputError, match="cannot import 'no_such_module_xyz'"):
        build_ops("no_such_module_xyz:PIPELINE")
    with pytest.raises(InputError, match="MODULE:OBJECT"):
        build_ops("just_a_name")


@pytest.mark.timeout(120)
def test_workload_in_process(tmp_path):
    spec = {"result_file": str(tmp_path / "r.json"), "ops": ["ToTensor", "Normalize", "Collation"], "batch_size": 4,
            "runs": 2, "seconds": 0.02, "maps_file": str(tmp_path / "maps.txt"), "warmup_calls": 1}
    assert run_workload(spec) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["order"] == ["ToTensor", "Normalize", "Collation"] and res["errors"] == {}
    assert res["markers"] == {"_lotus_op__ToTensor": "ToTensor", "_lotus_op__Normalize": "Normalize",
                              "_lotus_op__Collation": "Collation"}
    for op in res["order"]:
        assert res["ops"][op]["runs"] == ["0", "1"] and min(res["ops"][op]["calls"]) >= 1
    assert "libc" in (tmp_path / "maps.txt").read_text()
    spec.update(list_only=True, ops=None, pipeline=PIPELINE)
    assert run_workload(spec) == 0
    assert json.loads((tmp_path / "r.json").read_text())["available"][2] == "Boom"
    spec.update(list_only=False, ops=["Nope"])
    assert run_workload(spec) == 2
    assert "unknown op(s) ['Nope']" in json.loads((tmp_path / "r.json").read_text())["fatal"]


@pytest.mark.timeout(240)
def test_pyspy_maps_decoder_and_resampler_and_reports_a_raising_op(tmp_path):
    """The check of issue #4, on this machine: Loader -> libjpeg(-turbo), RandomResizedCrop -> Pillow resampling."""
    if B.find_pyspy() is None:
        pytest.fail("py-spy is part of the test extra; install it")
    out = tmp_path / "m.json"
    res = CliRunner().invoke(cli, ["map", "run", "--backend", "pyspy", "--pipeline", PIPELINE,
                                   "--ops", "Loader", "RandomResizedCrop", "--ops", "Boom", "--runs", "2",
                                   "--seconds", "0.6", "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "Boom" in res.output and "boom on purpose" in res.output
    m = json.loads(out.read_text())
    meta = m["lotus"]
    assert list(m["op_to_func"]) == ["Loader", "RandomResizedCrop"]
    assert meta["errors"]["Boom"].startswith("RuntimeError: boom on purpose")
    assert meta["backend"] == "pyspy" and meta["runs"] == {"Loader": 2, "RandomResizedCrop": 2}
    for op in ("Loader", "RandomResizedCrop"):
        assert meta["samples"][op] >= 30, meta["samples"]
        assert sum(m["weights"][op].values()) == pytest.approx(1.0, abs=1e-4)
        assert set(m["op_to_func"][op]) <= set(m["weights"][op])
    loader = m["weights"]["Loader"]
    jpeg = {k: w for k, w in loader.items() if k.split("|")[-1].startswith("libjpeg")}
    # Shares move with machine load (this suite shares 2 cores with py-spy and the workload): loose bounds.
    assert sum(jpeg.values()) >= 0.2, loader
    by_module: dict[str, float] = {}
    for k, w in loader.items():
        if not k.startswith("[Python"):
            by_module[k.split("|")[-1]] = by_module.get(k.split("|")[-1], 0.0) + w
    assert max(by_module, key=by_module.get).startswith("libjpeg"), by_module  # the decoder's library leads
    names = {k.split("|")[0] for k in jpeg}
    if _jpeg_names_expected(meta["modules"]):  # Pillow's libjpeg has symbols, or a build that can lend them
        assert names & JPEG_DECODE, names
    rrc = m["weights"]["RandomResizedCrop"]
    native = [k for k in rrc if not k.startswith("[Python")]
    top = native[0]
    assert "ImagingResample" in top and top.split("|")[1].startswith("_imaging"), native[:3]
    assert sum(w for k, w in rrc.items() if "ImagingResample" in k) >= 0.15, rrc


@pytest.mark.timeout(120)
def test_pyspy_not_permitted_says_how_to_fix(tmp_path, monkeypatch):
    fake = _stub(tmp_path / "py-spy", "import sys\nsys.stderr.write('Error: Failed to open process: "
                                      "Operation not permitted (os error 1)\\n')\nsys.exit(1)\n")
    monkeypatch.setattr(B, "find_pyspy", lambda: str(fake))
    res = CliRunner().invoke(cli, ["map", "run", "--backend", "pyspy", "--ops", "RandomHorizontalFlip", "--runs", "1",
                                   "--seconds", "0.05", "--out", str(tmp_path / "m.json")])
    assert res.exit_code == 1, res.output
    assert "ptrace" in res.output and "SYS_PTRACE" in res.output and "Operation not permitted" in res.output
    assert not (tmp_path / "m.json").exists()


@pytest.mark.timeout(120)
def test_a_pipeline_that_cannot_load_is_reported(tmp_path):
    res = CliRunner().invoke(cli, ["map", "run", "--backend", "pyspy", "--pipeline", "no_such_module_xyz:T",
                                   "--out", str(tmp_path / "m.json")])
    assert res.exit_code == 1, res.output
    assert "the workload could not run" in res.output and "cannot import 'no_such_module_xyz'" in res.output


def test_missing_tools_say_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setattr(B, "find_pyspy", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    for backend, text in (("pyspy", "pip install py-spy"), ("vtune", "VTune Profiler not found"),
                          ("uprof", "AMD uProf not found")):
        res = CliRunner().invoke(cli, ["map", "run", "--backend", backend, "--out", str(tmp_path / "m.json")])
        assert res.exit_code == 1 and text in res.output, res.output
    assert B.auto_backend() == "pyspy"
    res = CliRunner().invoke(cli, ["map", "run", "--image", str(tmp_path / "none.jpg"), "--out", "m.json"])
    assert res.exit_code == 1 and "no such image file" in res.output


def test_command_lines():
    wl = B.workload_command("/w/spec.json", python="/py")
    assert wl == ["/py", "-m", "lotus.map._workload", "/w/spec.json"]
    assert B.pyspy_command("/bin/py-spy", 42, "/w/o.txt", 250) == [
        "/bin/py-spy", "record", "--native", "--format", "raw", "--rate", "250", "--pid", "42", "-o", "/w/o.txt"]
    assert B.vtune_collect_command("vtune", "/w/r", wl) == [
        "vtune", "-collect", "hotspots", "-start-paused", "-result-dir", "/w/r", "-quiet", "--", *wl]
    assert B.vtune_report_command("vtune", "/w/r", "/w/o.csv") == [
        "vtune", "-report", "hotspots", "-result-dir", "/w/r", "-format", "csv", "-csv-delimiter", "comma",
        "-report-output", "/w/o.csv"]
    assert B.uprof_collect_command("AMDuProfCLI", "/w/s", wl, start_paused=True) == [
        "AMDuProfCLI", "collect", "--config", "tbp", "--start-paused", "-o", "/w/s", *wl]
    assert "--start-paused" not in B.uprof_collect_command("AMDuProfCLI", "/w/s", wl, start_paused=False)
    assert B.uprof_report_command("AMDuProfCLI", "/w/s/x") == ["AMDuProfCLI", "report", "-i", "/w/s/x"]
    assert "ptrace" in B.explain_pyspy_failure("Error: Permission denied (os error 13)", 1)
    assert B.explain_pyspy_failure("", 3) == "py-spy failed (exit code 3): no output"


def test_uprof_controller_discovery(tmp_path, monkeypatch):
    monkeypatch.delenv("LOTUS_UPROF_LIB", raising=False)
    root = tmp_path / "AMDuProf_5.0"
    (root / "bin").mkdir(parents=True)
    cli_path = _stub(root / "bin" / "AMDuProfCLI", "")
    assert B.uprof_controller(str(cli_path)) is None
    (root / "lib" / "x64").mkdir(parents=True)
    lib = root / "lib" / "x64" / "libAMDProfileController.so"
    lib.write_bytes(b"")
    assert B.uprof_controller(str(cli_path)) == str(lib)
    monkeypatch.setenv("LOTUS_UPROF_LIB", str(cli_path))
    assert B.uprof_controller(None) == str(cli_path)


FAKE_VTUNE = """
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if args[0] == "-collect":
    os.makedirs(args[args.index("-result-dir") + 1], exist_ok=True)
    sys.exit(subprocess.call(args[args.index("--") + 1:]))
if args[0] == "-report":
    op = os.path.basename(args[args.index("-result-dir") + 1]).rsplit("-", 1)[0]
    src = os.path.join(os.environ["FAKE_SRC"], op, "1.csv")
    if os.path.exists(src):
        shutil.copyfile(src, args[args.index("-report-output") + 1])
    else:  # nothing collected: a report with its header only
        with open(args[args.index("-report-output") + 1], "w") as fh:
            fh.write("Function,CPU Time,Module\\n")
"""

FAKE_UPROF = """
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(args) + "\\n")
if args[0] == "collect":
    out = args[args.index("-o") + 1]
    session = os.path.join(out, "AMDuProf-python-TBP_May-22-2024_20-54-15")
    os.makedirs(session)
    sys.exit(subprocess.call(args[args.index("-o") + 2:]))
if args[0] == "report":
    session = args[args.index("-i") + 1]
    op = os.path.basename(os.path.dirname(session)).rsplit("-", 1)[0]
    shutil.copyfile(os.path.join(os.environ["FAKE_SRC"], op, "1.csv"), os.path.join(session, "report.csv"))
"""


@pytest.mark.timeout(240)
def test_vtune_backend_through_a_stand_in(tmp_path, monkeypatch, intel_dir):
    """vtune is not installed here: a stand-in runs the workload (ITT mode) and returns the study's reports."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir / "vtune", FAKE_VTUNE)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_SRC", str(intel_dir))
    out = tmp_path / "m.json"
    res = CliRunner().invoke(cli, ["map", "run", "--pipeline", PIPELINE, "--ops", "Boom", "RandomResizedCrop",
                                   "--runs", "1", "--seconds", "0.05", "--work-dir", str(tmp_path / "work"),
                                   "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "mapped with vtune" in res.output  # auto picks vtune when it is on PATH
    assert "Boom" in res.output and "boom on purpose" in res.output
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[0] for c in calls] == ["-collect", "-report", "-collect", "-report"]
    assert calls[0][:3] == ["-collect", "hotspots", "-start-paused"]
    assert calls[0][calls[0].index("--") + 1:][1:3] == ["-m", "lotus.map._workload"]
    spec = json.loads(Path(calls[0][-1]).read_text())  # pipeline order: RandomResizedCrop, then Boom
    assert spec["mode"] == "itt" and spec["ops"] == ["RandomResizedCrop"] and spec["runs"] == 1
    result = json.loads(Path(spec["result_file"]).read_text())
    assert result["errors"] == {} and result["ops"]["RandomResizedCrop"]["calls"][0] >= 1
    m = json.loads(out.read_text())
    assert m["lotus"]["backend"] == "vtune"
    assert m["lotus"]["errors"]["Boom"].startswith("RuntimeError: boom on purpose")
    assert list(m["op_to_func"]) == ["RandomResizedCrop"]
    resample = "ImagingResampleHorizontal_8bpc|_imaging.cpython-310-x86_64-linux-gnu.so"
    assert m["op_to_func"]["RandomResizedCrop"][0] == resample
    assert (tmp_path / "work" / "vtune" / "RandomResizedCrop" / "1.csv").exists()


@pytest.mark.timeout(240)
def test_uprof_backend_through_a_stand_in(tmp_path, monkeypatch, amd_dir):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir / "AMDuProfCLI", FAKE_UPROF)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_SRC", str(amd_dir))
    monkeypatch.delenv("LOTUS_UPROF_LIB", raising=False)
    out = tmp_path / "m.json"
    res = CliRunner().invoke(cli, ["map", "run", "--backend", "uprof", "--ops", "RandomResizedCrop", "--runs", "1",
                                   "--seconds", "0.05", "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[0] for c in calls] == ["collect", "report"]
    assert calls[0][:3] == ["collect", "--config", "tbp"] and "--start-paused" not in calls[0]
    assert "libAMDProfileController.so not found" in res.output
    m = json.loads(out.read_text())
    assert m["op_to_func"]["RandomResizedCrop"][0].startswith("ImagingResampleHorizontal_8bpc|")
    assert m["lotus"]["backend"] == "uprof"
