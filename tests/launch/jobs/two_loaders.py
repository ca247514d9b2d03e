"""A job with a training loader and a validation loader run every 10 steps (driven by tests/launch)."""

import sys

import torch
from torch.utils.data import DataLoader

train = DataLoader(list(range(1024)), batch_size=4, num_workers=1, shuffle=True)
val = DataLoader(list(range(16)), batch_size=4, num_workers=0)
seen = 0
for _epoch in range(100):
    for i, batch in enumerate(train):
        assert isinstance(batch, torch.Tensor) and batch.shape == (4,)
        if i % 10 == 0:
            seen += sum(len(v) for v in val)
print(f"val samples {seen}", file=sys.stderr)
