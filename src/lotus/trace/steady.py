"""The steady-state rate of a loader's hand-offs, with its 95% interval (numpy only; no pandas, no torch).

The one estimator behind every rate lotus reports (:mod:`lotus.analysis.throughput` for traces, the
in-process probe stop rule of :mod:`lotus.dataloader.probe` while a job runs):

* **window**: from the hand-off of the ramp's last batch to the last hand-off. The ramp is the
  ``num_workers x prefetch_factor`` batches that can all be ready before the loop's first request: they
  go at the step's pace, not the pipeline's. Leading hand-offs after it whose gap is far above the
  window's median (a first CUDA step, a cold start) are start-up and left out too (at most a few).
  Epoch starts inside the window count: a long run pays them.
* **rate**: samples in the window / the window's seconds.
* **interval**: batch means. The window is cut into ``m`` consecutive blocks of whole rounds of the
  workers (a round: ``num_workers`` batches; bursts of workers average out inside a block); the
  ratio estimator's standard error from the blocks' residuals ``n_j - R d_j``, Student's t with
  ``m - 1`` degrees of freedom. Fewer than :data:`MIN_BLOCKS` blocks: no interval (``ci95`` None).
  With ``epochs`` given and at least ``MIN_BLOCKS`` epoch starts inside the window (epoch starts, with
  their restart gaps, dominate the variance of blocks that hold one or not), blocks are whole epochs
  instead (grouped to at most :data:`MAX_BLOCKS`), so that every block pays its share of epoch starts.

``segments``: hand-offs split into independent stretches (a replay probe's epochs): each stretch skips
its own ramp and the gaps between stretches are not counted.

An interval wider than :data:`PRECISION` (the probes' target) is never silent: the rate's ``note`` says
so (:func:`interval_note`). :func:`ended_by` words why a probe ended for every table that lists probes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MIN_BLOCKS = 4  # fewer blocks: no interval
MAX_BLOCKS = 30  # at most this many blocks (longer blocks: less correlation between neighbours)
MIN_ROUNDS = 2  # a window shorter than this many rounds of all workers is not a steady state
STARTUP_FACTOR = 5.0  # a leading gap this many times the window's median gap is start-up
MAX_STARTUP = 3  # at most this many leading batches are dropped as start-up
PRECISION = 0.03  # the probes' target: a steady rate known to +-3% (95%); wider intervals get a note

# Student's t, 97.5% quantile, by degrees of freedom (1..30); 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(dof: int) -> float:
    return _T975[dof - 1] if 1 <= dof <= len(_T975) else 1.96


@dataclass(frozen=True)
class SteadyRate:
    """A steady-state rate: ``samples_per_s`` and its 95% interval ``ci95`` (None when too short)."""

    samples_per_s: float | None
    ci95: tuple[float, float] | None
    batches: int  # batches inside the window
    samples: float  # samples inside the window
    window_s: float
    ramp_batches: int  # left out: the prefetched ramp (per segment)
    startup_batches: int  # left out: leading start-up batches after the ramp
    blocks: int  # blocks behind the interval
    note: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def rel_halfwidth(self) -> float | None:
        """Half the interval's width over the rate (0.03 = +-3%)."""
        if self.ci95 is None or not self.samples_per_s:
            return None
        return (self.ci95[1] - self.samples_per_s) / self.samples_per_s

    def as_dict(self) -> dict:
        return {"samples_per_s": self.samples_per_s, "ci95": list(self.ci95) if self.ci95 else None,
                "rel_halfwidth": self.rel_halfwidth, "batches": self.batches, "samples": self.samples,
                "window_s": self.window_s, "ramp_batches": self.ramp_batches,
                "startup_batches": self.startup_batches, "blocks": self.blocks, "note": self.note}


def interval_note(rel_halfwidth: float | None, target: float = PRECISION) -> str | None:
    """'interval +-28.8%: the job ended (or the cap stopped it) before +-3%' when the interval is wider than
    ``target``; None otherwise (or without an interval: its own note says why)."""
    if rel_halfwidth is None or rel_halfwidth <= target:
        return None
    return f"interval +-{rel_halfwidth:.1%}: the job ended (or the cap stopped it) before +-{target * 100:g}%"


_ENDED = {"precision": "precision", "steps": "steps cap", "time": "time cap"}


def ended_by(stopped_by: str | None, exit_code: int | None = 0) -> str:
    """Why a probe ended, in words: its interval (``precision``), its caps (``steps cap``, ``time cap``),
    ``job ended`` (the job finished before any of them), ``failed``."""
    if exit_code not in (0, None):
        return "failed"
    return _ENDED.get(stopped_by or "", stopped_by or "job ended")


def _startup(t: np.ndarray, k: int) -> int:
    """Leading batches after the ramp (index k on) whose gap dwarfs the window's median gap."""
    gaps = np.diff(t[k - 1:])
    if len(gaps) < 4:
        return 0
    med = float(np.median(gaps))
    s = 0
    while s < min(MAX_STARTUP, len(gaps) - 3) and med > 0 and gaps[s] > STARTUP_FACTOR * med:
        s += 1
    return s


def _blocks(t: np.ndarray, n: np.ndarray, start: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block of ``size`` hand-offs from index ``start``: (samples, seconds); the rest joins the last."""
    count = (len(t) - start) // size
    if count <= 0:
        return np.zeros(0), np.zeros(0)
    edges = start + size * np.arange(count + 1)
    edges[-1] = len(t)
    csum = np.concatenate([[0.0], np.cumsum(n)])
    samples = csum[edges[1:]] - csum[edges[:-1]]
    secs = (t[edges[1:] - 1] - t[edges[:-1] - 1]) / 1e9
    return samples, secs


def _epoch_blocks(t: np.ndarray, n: np.ndarray, start: int, epochs: np.ndarray):
    """Blocks of whole epochs from index ``start`` (the first, partial epoch joins the first block); None when
    the window holds fewer than MIN_BLOCKS epoch starts."""
    ep = epochs[start:]
    starts = np.flatnonzero(np.diff(ep) != 0) + 1 + start  # indices where a new epoch begins
    if len(starts) < MIN_BLOCKS:
        return None
    group = max(1, math.ceil(len(starts) / MAX_BLOCKS))
    bounds = [start, *starts[group::group].tolist(), len(t)]
    csum = np.concatenate([[0.0], np.cumsum(n)])
    b = np.asarray(bounds)
    return csum[b[1:]] - csum[b[:-1]], (t[b[1:] - 1] - t[b[:-1] - 1]) / 1e9


def steady_rate(t_ns, samples=None, *, ramp: int, workers: int = 0, segments=None, epochs=None) -> SteadyRate:
    """The steady-state rate of sorted hand-off times ``t_ns`` (ns) carrying ``samples`` each (default 1:
    a rate of batches); ``ramp`` batches left out at the start (of each segment, with ``segments``)."""
    t_all = np.asarray(t_ns)
    # from the first hand-off, in integer ns first: wall-clock ns in float64 are 256 ns apart (a window's
    # seconds were off by up to half a microsecond: the loop "waited 100.002% of the window")
    if t_all.dtype.kind in "iu" and len(t_all):
        t_all = t_all - t_all[0]
    t_all = t_all.astype(np.float64)
    n_all = np.ones(len(t_all)) if samples is None else np.nan_to_num(np.asarray(samples, dtype=np.float64))
    seg = np.zeros(len(t_all), dtype=np.int64) if segments is None else np.asarray(segments)
    round_len = max(int(workers), 1)
    k = max(int(ramp), 1)
    parts, skipped_startup, notes = [], 0, []
    for sid in (np.unique(seg) if len(seg) else []):
        sel = seg == sid
        t, n = t_all[sel], n_all[sel]
        kk = k
        if len(t) < k + 2:
            if len(t) < 2 or segments is not None:
                continue
            kk = max(1, len(t) - 2) if len(t) > 2 else 1
            notes.append(f"only {len(t)} batches, fewer than the ramp of {k} and two more: {kk} left out, "
                         "the rate includes prefetched batches (too short to trust)")
        s = _startup(t, kk)
        skipped_startup += s
        parts.append((t, n, kk + s))
    win_batches = sum(len(t) - st for t, _, st in parts)
    if not parts or win_batches < 1:
        why = (f"{len(t_all)} batch(es) handed out: none after the ramp of {k}" if len(t_all)
               else "no batch was handed out")
        return SteadyRate(None, None, 0, 0.0, 0.0, k, 0, 0, note=why)
    size = round_len * max(1, math.ceil(win_batches / (round_len * MAX_BLOCKS)))
    if win_batches < MIN_BLOCKS * size:
        size = max(1, win_batches // MIN_BLOCKS)
    bn, bd = [], []
    by_epoch = None
    if epochs is not None and segments is None and len(parts) == 1:
        t, n, st = parts[0]
        by_epoch = _epoch_blocks(t, n, st, np.asarray(epochs))
    if by_epoch is not None:
        bn, bd = [by_epoch[0]], [by_epoch[1]]
        size = round_len  # whole epochs: longer than a round
    for t, n, st in parts if by_epoch is None else []:
        a, b = _blocks(t, n, st, size)
        bn.append(a)
        bd.append(b)
    bn, bd = np.concatenate(bn), np.concatenate(bd)
    total_n, total_d = float(bn.sum()), float(bd.sum())
    if total_d <= 0:
        return SteadyRate(None, None, win_batches, total_n, 0.0, k, skipped_startup, 0, note="no time elapsed")
    rate = total_n / total_d
    m = len(bn)
    if win_batches < MIN_ROUNDS * round_len:
        notes.append(f"window of {win_batches} batches is under {MIN_ROUNDS} rounds of {round_len} workers")
    ci = None
    if m >= MIN_BLOCKS:
        resid = bn - rate * bd
        se = math.sqrt(float((resid ** 2).sum()) / (m * (m - 1))) / (total_d / m)
        hw = t975(m - 1) * se
        ci = (max(rate - hw, 0.0), rate + hw)
        if size < round_len:
            notes.append("blocks shorter than a round of the workers: the interval is rough")
    else:
        notes.append(f"{win_batches} batches after the ramp: too few for an interval")
    wide = interval_note((ci[1] - rate) / rate if ci and rate else None)
    if wide:
        notes.append(wide)
    return SteadyRate(rate, ci, win_batches, total_n, total_d, k, skipped_startup, m,
                      note="; ".join(notes) or None)


def combine(rates: list[SteadyRate]) -> tuple[float | None, tuple[float, float] | None]:
    """Sum of independent rates (ranks side by side) and its interval (half-widths added in quadrature)."""
    vals = [r for r in rates if r.samples_per_s is not None]
    if not vals:
        return None, None
    total = sum(r.samples_per_s for r in vals)
    if any(r.ci95 is None for r in vals):
        return total, None
    hw = math.sqrt(sum(((r.ci95[1] - r.ci95[0]) / 2) ** 2 for r in vals))
    return total, (max(total - hw, 0.0), total + hw)
