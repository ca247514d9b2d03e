"""The bytes a collation made (trace format 6): a ``batch_bytes`` record for the batch ids divisible by
BATCH_BYTES_EVERY, from the worker that collated it or from the main process without workers."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.dataloader.instrument import batch_nbytes


class Images:
    """``n`` samples of a 3x16x16 float tensor and an int label: 3,072 + 8 bytes a sample once collated."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        return torch.full((3, 16, 16), float(i)), i


def test_the_bytes_of_a_batch_are_its_tensors_bytes():
    import torch

    t = torch.zeros(4, 3, 8, 8)
    assert batch_nbytes(t) == 4 * 3 * 8 * 8 * 4
    assert batch_nbytes([t, torch.zeros(4, dtype=torch.int64)]) == 3072 + 32
    assert batch_nbytes({"x": t, "meta": ["a", "b"], "y": (np.zeros(3, np.float32),)}) == 3072 + 12
    assert batch_nbytes(["text", 3, None]) == -1 and batch_nbytes(7) == -1
    assert batch_nbytes([[[[t]]]]) == -1  # deeper than 3 levels: not searched


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_traced_run_records_every_64th_batch(tmp_path, workers):
    from lotus.dataloader import DataLoader
    from lotus.trace import load_events
    from lotus.trace import schema as S

    loader = DataLoader(Images(4 * 130), batch_size=4, num_workers=workers, trace_dir=tmp_path)
    for _ in range(2):
        for _ in loader:
            pass
    del loader
    ev = load_events(tmp_path)
    b = ev[ev["name"] == "batch_bytes"].sort_values(["epoch", "batch_id"])
    every = S.BATCH_BYTES_EVERY
    assert b["batch_id"].tolist() == list(range(0, 130, every)) * 2  # 130 batches an epoch, two epochs
    assert (b["arg"] == 4 * (3 * 16 * 16 * 4 + 8)).all()
    assert (b["worker_id"] == -1).all() if workers == 0 else (b["worker_id"] >= 0).all()
