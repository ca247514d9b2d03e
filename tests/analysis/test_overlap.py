"""lotus.analysis.overlap: independent summaries in threads give what they give one after the other."""

from __future__ import annotations

import threading

import pytest

from lotus.analysis import overlap


def test_results_by_name_in_threads(monkeypatch):
    monkeypatch.setattr(overlap, "cpus", lambda: 2)
    names = {}

    def call(k):
        def f():
            names[k] = threading.current_thread().name
            return k * 10
        return f

    got = overlap.at_once({k: call(k) for k in (3, 1, 2)})
    assert got == {3: 30, 1: 10, 2: 20} and list(got) == [3, 1, 2]
    assert all(n.startswith("lotus-summary") for n in names.values())


def test_one_cpu_runs_here_in_turn(monkeypatch):
    monkeypatch.setattr(overlap, "cpus", lambda: 1)
    order = []
    got = overlap.at_once({"a": lambda: order.append("a") or threading.current_thread(),
                           "b": lambda: order.append("b") or threading.current_thread()})
    assert order == ["a", "b"] and got["a"] is got["b"] is threading.current_thread()


def test_an_error_is_raised_after_the_others_finish(monkeypatch):
    monkeypatch.setattr(overlap, "cpus", lambda: 2)
    done = threading.Event()

    def boom():
        raise ValueError("bad column")

    def slow():
        done.wait(0.2)
        done.set()
        return 1

    with pytest.raises(ValueError, match="bad column"):
        overlap.at_once({"x": boom, "y": slow})
    assert done.is_set()
