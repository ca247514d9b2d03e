"""Canary and differential test of lotus.analysis._mpl_compat: the one private matplotlib name lotus overrides.

Fails loudly when matplotlib renames ``Legend._auto_legend_data`` or changes what it returns; and checks that the
override leaves the "best" legend place, and so the figure's pixels, exactly as matplotlib's own search."""

from __future__ import annotations

import io
import logging

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.legend import Legend

from lotus.analysis import _mpl_compat
from lotus.analysis._mpl_compat import fast_best


def test_matplotlib_still_has_the_method_and_its_return_shape():
    assert hasattr(Legend, _mpl_compat.METHOD), (f"matplotlib {matplotlib.__version__} renamed "
                                                 f"Legend.{_mpl_compat.METHOD}: update lotus/analysis/_mpl_compat.py")
    fig, ax = plt.subplots()
    ax.scatter([1, 2, 3], [3, 2, 1], label="a")
    leg = ax.legend()
    fig.canvas.draw()
    _, _, offsets = getattr(leg, _mpl_compat.METHOD)(fig.canvas.get_renderer())
    assert len(offsets) == 3 and np.asarray(offsets).shape == (3, 2)
    plt.close(fig)


def _png(corner: str, fast: bool, n: int = 20_000) -> tuple[bytes, tuple]:
    rng = np.random.default_rng(7)
    x, y = rng.random(n), rng.random(n)
    # a hole in the points at one place: the best legend place differs between the cases (4 places)
    keep = {"upper right": ~((x > 0.6) & (y > 0.6)), "lower left": ~((x < 0.4) & (y < 0.4)),
            "center": ~((abs(x - 0.5) < 0.2) & (abs(y - 0.5) < 0.2)), "none": np.ones(n, bool)}[corner]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.scatter(x[keep], y[keep], s=8, label="points")
    ax.scatter(x[~keep][:50], y[~keep][:50] * 0 - 1, s=8, color="0.5", label="other")
    ax.axhline(0.5, color="k", ls="--", label="line")
    leg = ax.legend(fontsize="small")
    if fast:
        assert fast_best(leg) is leg and type(leg) is not Legend
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    where = tuple(np.round(leg.get_window_extent().bounds, 6))
    plt.close(fig)
    return buf.getvalue(), where


@pytest.mark.parametrize("corner", ["upper right", "lower left", "center", "none"])
def test_the_same_place_and_the_same_pixels(corner):
    slow, at_slow = _png(corner, fast=False)
    fast, at_fast = _png(corner, fast=True)
    assert at_fast == at_slow
    assert fast == slow


def test_a_legend_without_the_method_is_left_alone_with_one_warning(caplog):
    class Other:
        pass

    _mpl_compat.fast_best.__dict__.pop("_warned", None)
    with caplog.at_level(logging.WARNING):
        a, b = Other(), Other()
        assert fast_best(a) is a and type(a) is Other
        assert fast_best(b) is b
    assert sum("slow way" in r.message for r in caplog.records) == 1
