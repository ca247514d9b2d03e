"""Each defect the invariants found, with the smallest trace that showed it (the figure it gave before)."""

from __future__ import annotations

import json

import pytest

from lotus.analysis.jsonutil import dumps
from lotus.analysis.runs import load_config
from lotus.analysis.trends import trends
from tests.invariants import rules as R
from tests.invariants import trace_rules as T
from tests.invariants.commands import engine
from tests.invariants.conftest import DEMO
from tests.invariants.shapes import Shape, write_shape

ENGINES = ["memory", "scan"]


def _trends(path, eng: str, bucket_share: float | None = None) -> tuple[dict, object]:
    with engine(eng):
        cfg = load_config(path, engine="auto")
    t = cfg.batches["consumed_ns"].dropna()
    bucket = None if bucket_share is None else (int(t.max()) - int(t.min())) / 1e9 * bucket_share
    return json.loads(dumps(trends(cfg.events, cfg.batches, bucket_s=bucket))), cfg.batches


@pytest.mark.parametrize("eng", ENGINES)
def test_the_last_bucket_is_no_division_by_a_nanosecond(tmp_path, eng):
    """Two batches: the run's length is not a multiple of its twelfth, so a 13th bucket began a few ns
    before the last hand-off and its rate was taken over that span: 200,000 samples/s (3.2e9 on the
    README's demo run)."""
    t, batches = _trends(write_shape(tmp_path / "run", Shape(epochs=(2,))), eng)
    last = t["per_bucket"][-1]
    assert last["batches"] == 1 and last["samples_per_s"] is None and last["note"].startswith("too short")
    assert not T.check_trends(t, batches, "trends") and not R.check_json(t, "trends")
    demo, batches = _trends(DEMO, eng)
    assert not T.check_trends(demo, batches, "demo trends")
    assert demo["per_bucket"][-1]["samples_per_s"] is None


@pytest.mark.parametrize("eng", ENGINES)
def test_an_op_counts_in_the_bucket_its_batch_started_in(tmp_path, eng):
    """A batch that straddles a bucket edge: its op was counted in the next bucket, its preprocessing in
    its own, and the slowest op took 157% of the next bucket's preprocessing."""
    shape = Shape(workers=1, epochs=(4,), prep_us=(10_000, 2_000), step_us=(0,), ops=1)
    t, _ = _trends(write_shape(tmp_path / "run", shape), eng, bucket_share=0.5)
    shares = [r["slowest_op_share"] for r in t["per_bucket"] if r["slowest_op_share"] is not None]
    assert shares and all(0 < s <= 1 for s in shares)


def test_a_wait_across_bucket_edges_counts_its_part_in_each(tmp_path):
    """A 50 ms wait counted whole in the bucket it started in, a tenth of the run long: wait share 470%."""
    shape = Shape(workers=1, epochs=(3,), prep_us=(50_000,))
    t, _ = _trends(write_shape(tmp_path / "run", shape), "memory", bucket_share=0.1)
    shares = [r["wait_share"] for r in t["per_bucket"] if r["wait_share"] is not None]
    assert max(shares) == pytest.approx(1.0) and min(shares) >= 0
