"""worker_latencies without pandas' groupby (issue 25, item 2: whatif at 1B events): the same medians as the
groupby over (rank, epoch, worker) it replaced, ties of start times, missing values and clock skew included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.model.measures import _f64, worker_latencies


def by_groupby(b, have):
    """The groupby version worker_latencies had (lotus before issue 25 item 2), kept as the reference."""
    if b["dispatch_ns"].isna().all():
        return None, None
    lat, gap = [], []
    sub = b[have & b["worker_id"].notna().to_numpy(dtype=bool, na_value=False)]
    for _, g in sub.groupby(["rank", "epoch", "worker_id"], sort=False):
        g = g.sort_values("prep_start_ns")
        start, end, disp = _f64(g["prep_start_ns"]), _f64(g["prep_end_ns"]), _f64(g["dispatch_ns"])
        prev_end = np.r_[np.nan, end[:-1]]
        idle = disp > prev_end
        lat.append((start - disp)[idle])
        gap.append((start - prev_end)[~idle])
    lat = np.concatenate(lat) if lat else np.zeros(0)
    gap = np.concatenate(gap) if gap else np.zeros(0)
    lat, gap = lat[np.isfinite(lat) & (lat >= 0)], gap[np.isfinite(gap) & (gap >= 0)]
    return (float(np.median(lat)) if lat.size else None), (float(np.median(gap)) if gap.size else None)


def frame(rng, n: int, ranks: int, workers: int, missing: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows in a shuffled order, coarse start times (many ties), some values missing."""
    start = rng.integers(0, n // 3 + 2, size=n) * 1000 + 1_700_000_000_000_000_000
    dur = rng.integers(1, 5000, size=n)
    disp = start - rng.integers(-300, 3000, size=n)  # some dispatches after the start: skew, left out

    def nullable(v):
        return pd.array(np.where(rng.random(n) < missing, None, v), dtype="Int64")

    b = pd.DataFrame({"rank": rng.integers(0, ranks, size=n), "epoch": rng.integers(0, 3, size=n),
                      "worker_id": nullable(rng.integers(0, workers, size=n)), "dispatch_ns": nullable(disp),
                      "prep_start_ns": nullable(start), "prep_end_ns": nullable(start + dur)})
    return b, rng.random(n) > 0.1


@pytest.mark.parametrize("seed", range(12))
def test_the_medians_are_the_groupby_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    b, have = frame(rng, n, ranks=int(rng.integers(1, 4)), workers=int(rng.integers(1, 6)),
                    missing=[0.0, 0.05, 0.3][seed % 3])
    want = by_groupby(b, have)
    assert want != (None, None)
    assert worker_latencies(b, have) == want


def test_no_dispatch_and_no_row():
    rng = np.random.default_rng(1)
    b, have = frame(rng, 50, ranks=2, workers=2, missing=0.0)
    assert worker_latencies(b, np.zeros(len(b), bool)) == by_groupby(b, np.zeros(len(b), bool)) == (None, None)
    b["dispatch_ns"] = pd.array([None] * len(b), dtype="Int64")
    assert worker_latencies(b, have) == (None, None)
