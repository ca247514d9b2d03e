"""`lotus run` traces the DataLoaders that Lightning, HF Trainer and Accelerate build themselves."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lotus.query import load_batches

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "frameworks"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("script", "module"), [("lightning_train.py", "lightning"),
                                                ("hf_trainer.py", "transformers"),
                                                ("accelerate_train.py", "accelerate")])
def test_framework_loaders_are_traced(tmp_path, script, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    r = subprocess.run([sys.executable, "-m", "lotus", "run", "-o", str(tmp_path / "t"), "--no-verdict", "--",
                        sys.executable, script], cwd=EXAMPLES, env=env, capture_output=True, text=True,
                       timeout=280, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "done" in r.stdout
    batches = load_batches(tmp_path / "t")
    consumed = batches[batches["consumed_ns"].notna()]
    # 512 samples, batch 32, 2 epochs: every batch the framework handed to its loop is in the trace
    assert len(consumed) == 32
    assert set(consumed["epoch"]) == {0, 1}
    assert consumed["prep_dur_ns"].notna().all()  # prepared by lotus-traced workers
