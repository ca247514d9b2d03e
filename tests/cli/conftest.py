"""CLI test helpers: a runner that never hides tracebacks, golden files, and the analysis fixtures."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from lotus.cli import cli
from tests.analysis.conftest import (  # noqa: F401 - fixtures shared with the analysis tests
    ddp_run,
    real_run,
    straggler_run,
    synth_epochs,
    synth_native,
    synth_original,
)

GOLDEN = Path(__file__).resolve().parent / "golden"


def run(*args, ok: bool = True):
    """Invoke ``lotus ARGS``; asserts no traceback reached the user (and exit 0 when ``ok``)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in result.output and "Traceback" not in (result.stderr or "")
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    if ok:
        assert result.exit_code == 0, result.output + result.stderr
    return result


def _round(obj):
    if isinstance(obj, float):
        return float(f"{obj:.6g}") if math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def check_golden(name: str, text: str) -> None:
    """Compare with tests/cli/golden/NAME (JSON compared to 6 significant digits);
    LOTUS_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("LOTUS_UPDATE_GOLDEN"):
        path.write_text(text)
    expected = path.read_text()
    if name.endswith(".json"):
        assert _round(json.loads(text)) == _round(json.loads(expected))
    else:
        assert text == expected


@pytest.fixture
def lotus():
    return run
