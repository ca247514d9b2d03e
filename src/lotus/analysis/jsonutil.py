"""Plain JSON out of analysis results: numpy scalars to Python, NaN/inf to null, keys to strings."""

from __future__ import annotations

import json
import math
from pathlib import Path


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, TypeError):
            return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if obj.__class__.__name__ in ("NAType", "NaTType"):
        return None
    return str(obj)


def dumps(obj, *, indent: int | None = 2) -> str:
    """Strict JSON (no NaN) of an analysis result."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False)
