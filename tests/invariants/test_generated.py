"""Property-based: small traces of random shapes through every command; a broken invariant is shrunk to the
smallest shape that still breaks it (hypothesis prints it as a ``Shape(...)``: paste it into
``test_regressions.py``).

Examples per property: ``LOTUS_INVARIANT_EXAMPLES`` (default 12, the same ones every run; set it for that
many new random ones, e.g. ``LOTUS_INVARIANT_EXAMPLES=300 pytest tests/invariants``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.invariants import rules as R  # noqa: E402
from tests.invariants import trace_rules as T  # noqa: E402
from tests.invariants.commands import check_run, compare_engines, engine  # noqa: E402
from tests.invariants.shapes import Shape, write_shape  # noqa: E402

_N = os.environ.get("LOTUS_INVARIANT_EXAMPLES")
EXAMPLES = int(_N) if _N else 12
SETTINGS = settings(max_examples=EXAMPLES, derandomize=not _N, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TIMEOUT = pytest.mark.timeout(1200 + 20 * EXAMPLES)  # a broken invariant is shrunk: many more runs


@st.composite
def shapes(draw) -> Shape:
    ranks = draw(st.integers(1, 3))
    workers = draw(st.integers(0, 3))
    bs = draw(st.integers(1, 6))
    epochs = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=4)))
    keys = [(e, b) for e, n in enumerate(epochs) for b in range(n)]
    failed = frozenset(draw(st.sets(st.sampled_from(keys), max_size=2))) if keys else frozenset()
    return Shape(
        ranks=ranks, workers=workers, batch_size=bs, epochs=epochs,
        last_samples=draw(st.integers(0, bs - 1)),
        prep_us=tuple(draw(st.lists(st.integers(20, 20_000), min_size=1, max_size=4))),
        step_us=tuple(draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=3))),
        failed=failed, exhausted=draw(st.integers(0, 2)), detail_every=draw(st.integers(1, 3)),
        ops=draw(st.integers(0, 3)), persistent=draw(st.booleans()),
        rotate_bytes=draw(st.sampled_from([0, 0, 0, 1024, 4096])), gpu=draw(st.booleans()),
        skew_us=tuple(draw(st.lists(st.integers(-500, 500), min_size=ranks, max_size=ranks))),
        worker_skew_us=draw(st.sampled_from([0, 0, -300, 200])) if workers else 0)


def _baseline() -> Path:
    d = Path(tempfile.gettempdir()) / f"lotus-invariants-baseline-{os.getpid()}"
    if not d.exists():
        write_shape(d, Shape(epochs=(5, 5), prep_us=(4_000, 6_000)))
    return d


@TIMEOUT
@SETTINGS
@given(shape=shapes())
def test_every_command_on_a_generated_trace(shape):
    """Text, JSON and HTML of every command (in-memory engine), the JSON again on the scan engine: the
    invariants hold and the engines give the same figures; ``diff`` against a fixed run."""
    with tempfile.TemporaryDirectory() as tmp:
        run = write_shape(Path(tmp) / "run", shape)
        found, docs = [], {}
        for eng, text in (("memory", True), ("scan", False)):
            with engine(eng):
                v, docs[eng] = check_run(run, Path(tmp) / eng, text=text, diff_with=_baseline())
            found += v
        found += compare_engines(docs["memory"], docs["scan"])
        assert not found, "\n".join(dict.fromkeys(map(str, found)))


@TIMEOUT
@SETTINGS
@given(shape=shapes(), buckets=st.integers(1, 40), eng=st.sampled_from(["memory", "scan"]))
def test_trends_at_any_bucket_width(shape, buckets, eng):
    """The report's trends with buckets of a random width (a 1/``buckets`` of the run, so that batches
    straddle bucket edges): rates only from windows that hold enough hand-offs, never above what the
    batches could deliver; shares in [0, 1]."""
    from lotus.analysis.jsonutil import dumps
    from lotus.analysis.runs import load_config
    from lotus.analysis.trends import trends

    with tempfile.TemporaryDirectory() as tmp, engine(eng):
        cfg = load_config(write_shape(Path(tmp) / "run", shape), engine="auto")
        b = cfg.batches
        t = b["consumed_ns"].dropna()
        length = (int(t.max()) - int(t.min())) / 1e9 if len(t) else 0.0
        doc = json.loads(dumps(trends(cfg.events, b, bucket_s=max(length / buckets, 1e-6))))
        found = R.check_json(doc, "trends") + T.check_trends(doc, b, "trends")
        assert not found, "\n".join(map(str, found))
