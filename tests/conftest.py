"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A verbatim copy of ../shared/reference/lotus-2023 (real data of the original study, MIT licence),
# vendored so that CI on a clean clone has it. tests/trace/test_reference_copy.py checks it is unchanged.
REFERENCE = Path(__file__).resolve().parent / "data" / "lotus-2023"
SHARED_REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "lotus-2023"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    return REFERENCE


@pytest.fixture(autouse=True)
def _no_trace_env(monkeypatch, request):
    # Tests decide themselves whether tracing is on.
    for name in ("LOTUS_TRACE_DIR", "LOTUS_ITT", "LOTUS_GPU_TELEMETRY", "LOTUS_WORKERS", "LOTUS_STEPS",
                 "LOTUS_LAUNCH", "LOTUS_REPLAY", "LOTUS_DATASET_FILES",
                 "LOTUS_LOADER_ARGS", "LOTUS_DETAIL", "LOTUS_DETAIL_BUDGET_PCT"):
        monkeypatch.delenv(name, raising=False)
    # Tests of what the per-sample/per-op records say need every batch in detail; the detail budget (the
    # DataLoader's default) is tested by the tests marked ``detail_budget``.
    if request.node.get_closest_marker("detail_budget") is None:
        monkeypatch.setenv("LOTUS_DETAIL", "full")
    os.environ.setdefault("MPLBACKEND", "Agg")
