"""The start-up hook: torch's DataLoader is lotus's in every process of the job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lotus.launch.options import boot_dir

PROBE = (
    "import sys, torch.utils.data as d, torch.utils.data.dataloader as dl\n"
    "from torch.utils.data import DataLoader\n"
    "import lotus.dataloader\n"
    "ok = DataLoader is d.DataLoader is dl.DataLoader is lotus.dataloader.DataLoader\n"
    "print('patched' if ok else 'torch', isinstance(DataLoader([1]), lotus.dataloader.loader.TorchDataLoader))\n"
)


def _run(code, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=False, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.timeout(180)
def test_dataloader_is_lotus_s_after_import_torch(tmp_path):
    r = _run("import torch\n" + PROBE, {"PYTHONPATH": boot_dir(), "LOTUS_LAUNCH": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["patched", "True"]


@pytest.mark.timeout(180)
def test_without_the_launch_flag_nothing_changes_and_own_sitecustomize_still_runs(tmp_path):
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
    code = "import os, torch\n" + PROBE + "print(os.environ.get('OWN_SITECUSTOMIZE'))\n"
    r = _run(code, {"PYTHONPATH": f"{boot_dir()}{os.pathsep}{own}"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["torch", "True", "ran"]
    r = _run(code, {"PYTHONPATH": f"{boot_dir()}{os.pathsep}{own}", "LOTUS_LAUNCH": "1"}, tmp_path)
    assert r.stdout.split() == ["patched", "True", "ran"]


def test_patch_and_unpatch_in_process():
    import torch.utils.data

    from lotus.dataloader import DataLoader
    from lotus.launch.hook import patch_torch, unpatch_torch

    original = torch.utils.data.DataLoader
    try:
        assert patch_torch()
        assert torch.utils.data.DataLoader is DataLoader
        assert patch_torch()  # idempotent
    finally:
        unpatch_torch()
    assert torch.utils.data.DataLoader is original
