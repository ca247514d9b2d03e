"""``lotus info`` on a scanned run (:mod:`lotus.query.census`): every record counted while scanning, the
same counts, span, ranks and epochs as the in-memory events DataFrame."""

from __future__ import annotations

import pytest
import torch

from lotus.analysis.info import run_info
from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from tests.trace.test_summary_columns import _run


def _info_both(run, monkeypatch) -> tuple[str, str]:
    out = []
    for engine in ("memory", "scan"):
        monkeypatch.setenv("LOTUS_ENGINE", engine)
        cfg = load_config(run, engine="auto", census=True)
        assert (cfg.events.attrs.get("engine") == "scan") == (engine == "scan")
        out.append(dumps(run_info(cfg.events, cfg.batches)))
    return out[0], out[1]


@pytest.mark.parametrize("kind", ["synth", "outcome", "gpu", "real"])
def test_scanned_info_is_the_in_memory_info(kind, tmp_path, monkeypatch):
    mem, scan = _info_both(_run(kind, tmp_path), monkeypatch)
    assert mem == scan


class _DS(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 30

    def __getitem__(self, i):
        return torch.full((2,), float(i))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_scanned_info_of_a_dataloader_trace(workers, tmp_path, monkeypatch):
    """Packed num_workers=0 records and derived load/transform spans are counted as read in memory."""
    from lotus.dataloader import DataLoader

    loader = DataLoader(_DS(), batch_size=4, num_workers=workers, trace_dir=tmp_path / "run", trace_detail="full")
    for _ in range(2):
        for _b in loader:
            pass
    del loader
    mem, scan = _info_both(tmp_path / "run", monkeypatch)
    assert mem == scan and '"consumed"' in scan
