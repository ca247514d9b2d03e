"""The one place lotus leans on a private name of matplotlib: the "best" legend place over large scatters.

matplotlib's ``Legend._find_best_position`` weighs each of the nine candidate places by the scatter points they
cover, and ``Legend._auto_legend_data`` hands it those points as a Python list of one array per point, which
``Bbox.count_contains`` converts to an array again for every candidate: with 431k points (a 100M-event run's
batches) ~0.6 s a legend a draw, ~5 s of ``lotus report``. :func:`fast_best` gives a legend a subclass whose
``_auto_legend_data`` returns the same points as one array, converted once: the same counts, so the same place
and the same pixels (tests/analysis/test_mpl_compat.py checks both, and fails loudly when matplotlib renames the
method). Nothing is copied from matplotlib: the override calls it and converts its result.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)
METHOD = "_auto_legend_data"  # the private method overridden (matplotlib 3.5-3.11 at least)


def fast_best(legend):
    """``legend`` made to weigh its candidate places over one array of points (its class swapped for a
    subclass); returned unchanged where matplotlib has no such method (a warning, once)."""
    cls = type(legend)
    if not hasattr(cls, METHOD):
        if not getattr(fast_best, "_warned", False):
            fast_best._warned = True
            log.warning("matplotlib %s has no Legend.%s: the 'best' legend place is searched the slow way",
                        _version(), METHOD)
        return legend
    legend.__class__ = _subclass(cls)
    return legend


_SUBCLASSES: dict[type, type] = {}


def _subclass(cls: type) -> type:
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        def _auto_legend_data(self, *args, **kwargs):
            bboxes, lines, offsets = getattr(super(sub, self), METHOD)(*args, **kwargs)
            return bboxes, lines, (np.asarray(offsets, dtype=float).reshape(-1, 2) if len(offsets) else offsets)

        sub = _SUBCLASSES[cls] = type(f"FastBest{cls.__name__}", (cls,), {METHOD: _auto_legend_data})
    return sub


def _version() -> str:
    import matplotlib

    return matplotlib.__version__
