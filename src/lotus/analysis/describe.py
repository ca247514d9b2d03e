"""The statistics of one set of durations (the keys of :data:`STAT_KEYS`), shared by the DataFrame path
(:mod:`lotus.analysis.stats`), the exact streams (:mod:`lotus.analysis.exactstats`) and the compact
tables (:mod:`lotus.analysis.compact`). numpy only; imports nothing of lotus.
"""

from __future__ import annotations

import numpy as np

STAT_KEYS = ("count", "sum", "mean", "std", "std_pct", "min", "max", "median", "p25", "p75", "iqr", "p90", "p99")


def describe_ms(values_ns) -> dict[str, float | int | None]:
    """Statistics (ms) of durations in ns; NaN/NA values are ignored. Empty input: count 0, rest None."""
    arr = np.asarray(values_ns, dtype=np.float64)
    return describe_clean(arr[~np.isnan(arr)] / 1e6)


def describe_clean(arr: np.ndarray) -> dict[str, float | int | None]:
    """:func:`describe_ms` of values already in ms, without NaN."""
    if arr.size == 0:
        return {k: (0 if k == "count" else None) for k in STAT_KEYS}
    return stat_dict(arr.size, arr.sum(), arr.mean(), arr.std(), arr.min(), arr.max(),
                     np.percentile(arr, [25, 50, 75, 90, 99]))


def stat_dict(count: int, total, mean, std, lo, hi, pcts) -> dict[str, float | int | None]:
    """The statistics' dict from numpy's results (``pcts``: the 25th, 50th, 75th, 90th, 99th percentiles)."""
    p25, median, p75, p90, p99 = pcts
    mean, std = float(mean), float(std)
    return {
        "count": int(count), "sum": float(total), "mean": mean, "std": std,
        "std_pct": float(std / mean * 100) if mean else None,
        "min": float(lo), "max": float(hi), "median": float(median),
        "p25": float(p25), "p75": float(p75), "iqr": float(p75 - p25), "p90": float(p90), "p99": float(p99),
    }


def outlier_floor_ns(values_ns) -> float | None:
    """The original rule's lower fence: ``q1 - 2 * IQR`` (None for fewer than 4 values)."""
    arr = np.asarray(values_ns, dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    if arr.size < 4:
        return None
    q1, q3 = np.percentile(arr, [25, 75])
    return float(q1 - 2 * (q3 - q1))
