"""torch's "This DataLoader will create N worker processes" warning shows as with stock torch (issue 16)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import sys, tempfile, warnings
    import torch
    from torch.utils.data import DataLoader as Torch
    from lotus.dataloader import DataLoader as Lotus
    which, filt = sys.argv[1], sys.argv[2]
    warnings.simplefilter(filt)
    import os
    n = len(os.sched_getaffinity(0)) + 1  # more workers than CPUs
    kw = {"trace_dir": tempfile.mkdtemp()} if which == "traced" else {}
    cls = Torch if which == "torch" else Lotus
    dl = cls(list(range(n)), batch_size=n // 2, num_workers=n, **kw)
    for _ in range(2):
        for _ in dl:
            pass
""")


def _warnings(which: str, filt: str, tmp_path) -> list[str]:
    script = tmp_path / "w.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([p for p in sys.path if p])}
    env.pop("LOTUS_TRACE_DIR", None)
    r = subprocess.run([sys.executable, str(script), which, filt], capture_output=True, text=True, timeout=240,
                       check=False, env=env)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stderr.splitlines() if "worker processes in total" in ln]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("filt", ["default", "module"])
def test_worker_count_warning_shows_as_often_and_where_torch_shows_it(tmp_path, filt):
    torch_lines = _warnings("torch", filt, tmp_path)
    assert torch_lines
    assert _warnings("lotus", filt, tmp_path) == torch_lines
    assert _warnings("traced", filt, tmp_path) == torch_lines
