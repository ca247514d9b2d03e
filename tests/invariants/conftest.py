"""The corpus of the output invariants: the tests' fixture runs, the study's reference traces, a recorded
``lotus demo`` run, runs of lotus's own DataLoader, a GPU run with torch.profiler traces, and the
damaged traces of the bad-input tests. Generated shapes: :mod:`tests.invariants.test_generated`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

# the fixture runs join the corpus (taken by name in ``corpus``)
from tests.analysis.conftest import ddp_run, real_run, straggler_run, synth_epochs, synth_native, synth_original  # noqa: F401

DEMO = Path(__file__).resolve().parent / "data" / "demo-run"


def _damaged(reference: Path, synth: Path, root: Path) -> dict[str, Path]:
    """The damaged traces of tests/cli/test_bad_input.py, made the same way (and a missing and an empty
    directory: every command answers with one line and exit 1)."""
    out = {}
    d = out["workers-only"] = root / "workers-only"
    d.mkdir()
    for p in (reference / "traces" / "b128_gpu4").glob("*_worker_pid_*"):
        shutil.copy(p, d)
    d = out["truncated-line"] = shutil.copytree(reference / "traces" / "b128_gpu4", root / "truncated-line")
    f = d / "custom_log_worker_pid_93199"
    f.write_bytes(f.read_bytes()[:-9])
    d = out["bad-fields"] = shutil.copytree(reference / "traces" / "b128_gpu4", root / "bad-fields")
    f = d / "custom_log_worker_pid_93231"
    lines = f.read_text().splitlines()
    lines[4], lines[8], lines[6] = "SLoader,12x4,55", "SLoader,1697409315299326911", "Bogus,1697409315299326911,1000"
    f.write_text("\n".join(lines) + "\n")
    d = out["torn-record"] = shutil.copytree(synth, root / "torn-record")
    worker = sorted(d.glob("*-w0-*"))[0]
    worker.write_bytes(worker.read_bytes()[:-48] + b"\x01\x02\x03")
    (d / "lotus-r0-w7-p99.lotustrace").write_bytes(b"garbage")
    out["missing"] = root / "no-such-run"
    out["empty"] = root / "empty"
    out["empty"].mkdir()
    d = out["runs-with-a-broken-one"] = root / "runs-with-a-broken-one"
    shutil.copytree(synth, d / "good")
    (d / "broken").mkdir()
    (d / "broken" / "lotus-r0-main-p1.lotustrace").write_bytes(b"LOTUSTR1")
    return out


def _loader_runs(root: Path) -> dict[str, Path]:
    """Runs of lotus's DataLoader: num_workers=0 (packed records, format 3) and an IterableDataset that
    runs out in two workers."""
    import torch

    from lotus.dataloader import DataLoader
    from lotus.trace.writer import close_main_writers
    from tests.analysis.test_outcomes_e2e import Sharded

    out = {"packed": root / "packed", "iterable-end": root / "iterable-end"}
    loader = DataLoader(torch.utils.data.TensorDataset(torch.arange(40.0)), batch_size=4, trace_dir=out["packed"])
    for _ in range(2):
        for _ in loader:
            pass
    loader = DataLoader(Sharded(23), batch_size=4, num_workers=2, multiprocessing_context="fork",
                        trace_dir=out["iterable-end"])
    for _ in loader:
        pass
    del loader
    close_main_writers()
    return out


def _gpu_run(root: Path) -> Path:
    """CUDA-event timings, telemetry and a torch.profiler trace per rank (tests/analysis/test_gpu.py's run)."""
    from tests.analysis.test_gpu import write_gpu_run

    d = root / "gpu"
    for rank, doc in write_gpu_run(d, ranks=(0, 1), n=12, slow_rank=1).items():
        (d / f"rank{rank}.pt.trace.json").write_text(json.dumps(doc))
    return d


def _compacted(src: Path, root: Path) -> Path:
    from lotus.trace.compact import compact_run

    d = shutil.copytree(src, root / "compacted")
    compact_run(d)
    return d


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, reference_dir, request) -> dict[str, Path]:
    """name -> a trace directory (a run, or a directory of runs)."""
    from tests.trace.outcome_run import write_outcome_run

    root = tmp_path_factory.mktemp("corpus")
    fx = {name: request.getfixturevalue(name) for name in ("synth_native", "synth_original", "synth_epochs",
                                                            "straggler_run", "ddp_run", "real_run")}
    runs = {"synth-native": fx["synth_native"], "synth-original": fx["synth_original"],
            "synth-epochs": fx["synth_epochs"], "straggler": fx["straggler_run"], "ddp": fx["ddp_run"],
            "real-dataloader": fx["real_run"],
            "outcomes": write_outcome_run(root / "outcomes"),
            "outcomes-legacy": write_outcome_run(root / "outcomes-legacy", legacy=True),
            "demo": DEMO, "lotus-2023": reference_dir / "traces", "b128_gpu4": reference_dir / "traces" / "b128_gpu4",
            "gpu": _gpu_run(root), "compacted": _compacted(fx["ddp_run"], root),
            **_loader_runs(root), **_damaged(reference_dir, fx["synth_native"], root)}
    return runs
