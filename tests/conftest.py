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
def _no_trace_env(monkeypatch):
    # Tests decide themselves whether tracing is on.
    for name in ("LOTUS_TRACE_DIR", "LOTUS_ITT", "LOTUS_GPU_TELEMETRY", "LOTUS_WORKERS", "LOTUS_STEPS",
                 "LOTUS_LAUNCH", "LOTUS_REPLAY", "LOTUS_DATASET_FILES",
                 "LOTUS_LOADER_ARGS"):
        monkeypatch.delenv(name, raising=False)
    os.environ.setdefault("MPLBACKEND", "Agg")
