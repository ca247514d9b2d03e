"""Fixtures of the LotusMap tests: the reference exports of the original study."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def uarch_dir(reference_dir) -> Path:
    return reference_dir / "vtune-uarch"


@pytest.fixture(scope="session")
def intel_dir(reference_dir) -> Path:
    return reference_dir / "lotusmap-intel-hotspots"


@pytest.fixture(scope="session")
def amd_dir(reference_dir) -> Path:
    return reference_dir / "lotusmap-amd-uprof"


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return GOLDEN


@pytest.fixture(autouse=True)
def _lotus_logger_restored():
    """The CLI gives the "lotus" logger its own stderr handler and stops propagation; undo it after each test."""
    logger = logging.getLogger("lotus")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]
