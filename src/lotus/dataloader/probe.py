"""Probe mode (``lotus run --steps N [--precision P] [--max-seconds S]``): end the job cleanly once a loader
handed out N batches, or earlier once its steady-state rate is known well enough.

When the training loop asks a loader for the next batch (so the step of the last one is complete and
recorded) and the probe is over, :func:`end_job` closes the epoch in the trace, stops this iterator's
workers (their files get their end records), closes every trace file of this process, leaves a marker
file for the launcher (with why it stopped: ``steps``, ``precision`` or ``time``), and raises
``SystemExit(0)``: ``finally`` blocks and atexit handlers of the script run as on any exit. The launcher
stops a job that does not exit within its grace period (a thread that never ends).

:class:`StopRule` is the adaptive end: the hand-off times of the loader go through the one estimator
(:func:`lotus.analysis.steady.steady_rate`, the one :mod:`lotus.analysis.throughput` reports) every round
of the workers, no more often than keeps its cost under 1% of the loop's time (:data:`ESTIMATE_COST_RATIO`);
the probe ends when the 95% interval's half-width is within ``precision`` of the rate (after at least
:data:`MIN_BLOCKS_TO_STOP` blocks of whole rounds), or after ``max_s`` seconds of
hand-offs past the minimum window. With ``below`` it also ends once the whole interval lies under it (``below``;
after :data:`MIN_BLOCKS_BELOW` blocks): a setting shown to be worse needs no more precision, and the worse probes
of a search were the longest ones. ``lotus tune`` passes the rate under which a probe cannot be chosen, from the
best it measured so far, in samples/s; the rule times hand-offs, so it is in batches/s here
(:func:`lotus.dataloader.config.stop_rule` divides by the batch size).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lotus._env import STEPS_MARKER
from lotus.trace import schema as S

MIN_BLOCKS_TO_STOP = 8  # the interval of fewer blocks is itself too uncertain to stop on
MIN_WINDOW = 16  # and never fewer batches than this after the ramp
MIN_BLOCKS_BELOW = 4  # an interval wholly below ``below`` may stop a probe from this many blocks on (t: 3 dof)
# The loop's thread runs each estimate (~0.4 ms on the 2-vCPU VM): one every round of 2 workers took 4-8% of the
# CPU the workers needed there, and probes read that much under `lotus run` of the same job
# (benchmarks/traced_vs_alone.py --variants alone,traced,probe). The next periodic estimate waits for this many
# times the last one's cost of hand-offs (trace time): at most 1% of the loop's time.
ESTIMATE_COST_RATIO = 100


class StopRule:
    """Decides, per request of the loop, whether the probe has measured enough (see the module doc)."""

    def __init__(self, precision: float | None, max_s: float | None, below: float | None = None,
                 clock=time.perf_counter_ns):
        self.precision, self.below, self._clock = precision, below, clock  # clock: what an estimate costs
        self.max_ns = int(max_s * 1e9) if max_s else None
        self.t: list[int] = []
        self.epochs: list[int] = []
        self.seen = 0
        self.last = None  # the last estimate (lotus.analysis.steady.SteadyRate)
        self._next_ns = 0  # hand-off time before which no periodic estimate runs (ESTIMATE_COST_RATIO)

    def check(self, consumed: int, prev, workers: int, prefetch: int, epoch: int = 0) -> str | None:
        """``prev``: (batch, hand-off ns) of the batch the loop holds. Returns why to stop, or None."""
        if consumed > self.seen and prev is not None:
            self.t.append(prev[1])
            self.epochs.append(epoch)
            self.seen = consumed
        w = max(int(workers or 0), 1)
        ramp = max(int(workers or 0) * int(prefetch or 2), 1)
        need = ramp + max(MIN_BLOCKS_TO_STOP * w, MIN_WINDOW)
        n = len(self.t)
        if self.below is not None and n < need:  # a clearly worse setting may end before the precision's window
            low = ramp + max(MIN_BLOCKS_BELOW * w, MIN_WINDOW)
            if n >= low and not (n - low) % w and self._due() and self._below(self._estimate(ramp, workers)):
                return "below"
        if n < need:
            return None
        if self.max_ns is not None and self.t[-1] - self.t[0] >= self.max_ns:
            self._estimate(ramp, workers)
            return "time"
        if (self.precision is None and self.below is None) or (n - need) % w or not self._due():
            return None
        r = self._estimate(ramp, workers)
        if self._below(r):
            return "below"
        if (self.precision is not None and r.rel_halfwidth is not None and r.blocks >= MIN_BLOCKS_TO_STOP
                and r.rel_halfwidth <= self.precision):
            return "precision"
        return None

    def _below(self, r) -> bool:
        """The whole 95% interval under ``below``, from enough blocks."""
        return (self.below is not None and r.ci95 is not None and r.blocks >= MIN_BLOCKS_BELOW
                and r.ci95[1] < self.below)

    def _due(self) -> bool:
        """Whether enough hand-off time passed since the last estimate for the next one (ESTIMATE_COST_RATIO)."""
        return self.t[-1] >= self._next_ns

    def _estimate(self, ramp: int, workers: int):
        import numpy as np

        from lotus.analysis.steady import steady_rate

        t0 = self._clock()
        self.last = steady_rate(np.asarray(self.t, dtype=np.int64), ramp=ramp, workers=workers or 0,
                                epochs=np.asarray(self.epochs))
        self._next_ns = self.t[-1] + ESTIMATE_COST_RATIO * (self._clock() - t0)
        return self.last


def end_job(lt, iterator, why: str = "steps") -> None:
    """End the probe and the job: the trace complete, the marker written, ``SystemExit(0)``."""
    finish_probe(lt, iterator, why)
    raise SystemExit(0)


def finish_probe(lt, iterator, why: str = "steps") -> None:
    """Close the probe's trace (the epoch's end, this iterator's workers, every main-process trace file) and
    write the marker the launcher waits for. Never raises."""
    try:
        iterator._lotus_epoch_end(S.EPOCH_PROBE_END)
    except Exception:
        pass
    try:
        from lotus.dataloader import _torch_compat as compat

        compat.shutdown_workers(iterator)
    except Exception:
        pass
    try:
        from lotus.trace.writer import close_main_writers

        close_main_writers()
    except Exception:
        pass
    try:
        rule = getattr(lt, "stop_rule", None)
        est = rule.last.rel_halfwidth if rule is not None and rule.last is not None else None
        marker = Path(lt.trace_dir) / f"{STEPS_MARKER}-r{lt.rank}-p{os.getpid()}.json"
        tmp = marker.with_name(f".{marker.name}.tmp")  # whole or absent: a series' launcher reads it at once
        tmp.write_text(json.dumps({"pid": os.getpid(), "rank": lt.rank, "loader": lt.loader_id,
                                      "steps": lt.consumed, "wall_ns": time.time_ns(), "stopped_by": why,
                                      "rel_halfwidth": est, "segment": getattr(lt, "segment", 0)}))
        os.replace(tmp, marker)
    except Exception:
        pass
