"""The glue between ``lotus submit`` and :mod:`lotus.model`: an app's throughput-vs-CPUs curve.

This is the only place ``lotus submit`` touches the model. It expects of :mod:`lotus.model`:

* ``lotus.model.fit(trace_dir)`` -> a fitted model of the job traced in ``trace_dir`` (a path, or a list
  of paths of probes of the same job);
* ``model.predict(num_workers=N, cpus=C)`` -> an object with ``samples_per_s`` (float, or None when the
  model cannot say; ``reason`` then says why). ``cpus`` and the rate are *per rank*.

An app of R ranks given n CPUs runs n // R CPUs and max(1, n // R - 1) workers per rank, so its curve is
``R * predict(num_workers=max(1, n // R - 1), cpus=n / R).samples_per_s``. When the model cannot be
imported or fitted, :class:`CurveUnavailable` says why and the caller falls back to an equal split.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

_log = logging.getLogger("lotus.submit")

Curve = Callable[[int], float]


class CurveUnavailable(Exception):
    """No throughput curve for an app (model missing, fit failed, probe without a trace)."""


def workers_for(n_cpus: int, ranks: int = 1) -> int:
    """num_workers per rank for an app given ``n_cpus``: its CPUs per rank minus the main process, >= 1."""
    return max(1, int(n_cpus) // max(1, ranks) - 1)


def fit_curve(trace_dir: str | os.PathLike, ranks: int = 1) -> Curve:
    """samples/s of the app as a function of its CPUs, from the model fitted on ``trace_dir``."""
    try:
        from lotus.model import fit
    except ImportError as exc:  # the model package not built (yet)
        raise CurveUnavailable(f"lotus.model is not available ({exc})") from None
    try:
        model = fit(os.fspath(trace_dir))
    except Exception as exc:  # a damaged or empty trace: the app is sized without the model
        raise CurveUnavailable(f"the model could not be fitted on {trace_dir}: {exc}") from None
    r = max(1, int(ranks))

    def curve(n_cpus: int) -> float:
        per_rank = n_cpus / r
        if per_rank < 1:
            return 0.0
        p = model.predict(num_workers=workers_for(n_cpus, r), cpus=per_rank)
        rate = getattr(p, "samples_per_s", None)
        if rate is None:
            _log.debug("no prediction at %d CPUs: %s", n_cpus, getattr(p, "reason", "?"))
            return 0.0
        return float(rate) * r

    return curve
