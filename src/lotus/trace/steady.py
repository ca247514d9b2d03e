"""The steady-state rate of a loader's hand-offs, with its 95% interval (numpy only; no pandas, no torch).

The one estimator behind every rate lotus reports (:mod:`lotus.analysis.throughput` for traces, the
in-process probe stop rule of :mod:`lotus.dataloader.probe` while a job runs):

* **window**: from the hand-off of the ramp's last batch to the last hand-off. The ramp is the
  ``num_workers x prefetch_factor`` batches that can all be ready before the loop's first request: they
  go at the step's pace, not the pipeline's. Leading hand-offs after it whose gap is far above the
  window's median (a first CUDA step, a cold start) are start-up and left out too (at most a few).
  Epoch starts inside the window count: a long run pays them.
* **rate**: samples in the window / the window's seconds.
* **interval**: the ratio estimator's standard error (per hand-off ``e = samples - R x gap``), Student's t.
  Hand-offs inside epochs: batch means over ``m`` consecutive blocks of whole rounds of the workers (a
  round: ``num_workers`` batches; bursts of workers average out inside a block). With ``epochs`` given,
  each epoch start inside the window (its restart gap and the burst of its first round) is a unit of its
  own, a second stratum: a restart recurs at the same place of every epoch, so mixed into the blocks it
  made the one or two blocks holding it look like noise and widened a steady job's interval several times
  over. Degrees of freedom by Welch-Satterthwaite. Fewer than :data:`MIN_BLOCKS` blocks: no interval
  (``ci95`` None), unless the window holds :data:`MIN_BLOCKS` epoch starts (epochs of a batch or two):
  then blocks of whole epochs. Calibrated against repeats: ``benchmarks/calibration_sim.py`` (simulated
  jobs of known structure) and ``benchmarks/calibration.py`` (real jobs, each repeat its own process).

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


def _epoch_blocks(t: np.ndarray, n: np.ndarray, start: int, epochs: np.ndarray):
    """Blocks of whole epochs from index ``start`` (the first, partial epoch joins the first block); None when
    the window holds fewer than MIN_BLOCKS epoch starts. Only for windows of too few hand-offs inside epochs
    to block them (epochs of a batch or two): :func:`_stratified` otherwise."""
    ep = epochs[start:]
    starts = np.flatnonzero(np.diff(ep) != 0) + 1 + start  # indices where a new epoch begins
    if len(starts) < MIN_BLOCKS:
        return None
    group = max(1, math.ceil(len(starts) / MAX_BLOCKS))
    bounds = [start, *starts[group::group].tolist(), len(t)]
    csum = np.concatenate([[0.0], np.cumsum(n)])
    b = np.asarray(bounds)
    return csum[b[1:]] - csum[b[:-1]], (t[b[1:] - 1] - t[b[:-1] - 1]) / 1e9


def _block_sums(x: np.ndarray, size: int) -> np.ndarray:
    """Sums of consecutive groups of ``size`` values (the rest joins the last group)."""
    count = len(x) // size
    if count <= 0:
        return np.zeros(0)
    edges = size * np.arange(count + 1)
    edges[-1] = len(x)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    return csum[edges[1:]] - csum[edges[:-1]]


@dataclass(frozen=True)
class _Spread:
    """The rate's standard error and its degrees of freedom, from the units behind it."""

    se: float
    dof: int
    units: int
    rough: bool = False  # blocks shorter than a round of the workers


def _stratified(parts, rate: float, total_d: float, round_len: int, refill: int) -> _Spread | None:
    """Standard error of ``rate`` over the windows of ``parts`` (linearised ratio: per hand-off
    ``e = samples - rate x gap``), with epoch restarts as their own stratum.

    * hand-offs inside epochs: batch means, consecutive blocks of whole rounds of the workers (at most
      :data:`MAX_BLOCKS`), variance ``m x s^2`` of the blocks' sums of ``e``;
    * epoch restarts: one unit each, the epoch's first ``refill`` hand-offs (a round of the workers: the
      restart gap, then the rest of the first round, which the workers started together deliver as a
      burst), variance ``k x s^2`` of the units' sums of ``e``. A restart recurs at the same place of every epoch;
      mixed into the blocks, the one or two blocks that hold it widen the interval of a steady job several
      times over (the H100 host: +-14-19% where repeated runs agreed within +-2.3%).
      One restart only: its spread is taken as 20% of it (or the blocks' relative spread, if larger).

    Degrees of freedom by Welch-Satterthwaite. None when fewer than :data:`MIN_BLOCKS` blocks inside epochs.
    """
    e_in, e_re = [], []
    for t, n, st, ep in parts:
        if st >= len(t):
            continue
        d = np.diff(t[st - 1:]) / 1e9
        e = n[st:] - rate * d
        unit = np.full(len(e), -1)  # the restart unit of each hand-off (-1: inside an epoch)
        if ep is not None:
            for j, s0 in enumerate(np.flatnonzero(ep[st:] != ep[st - 1:-1])):
                unit[s0:s0 + refill] = np.where(unit[s0:s0 + refill] < 0, j, unit[s0:s0 + refill])
        inside = unit < 0
        e_in.append((e[inside], d[inside]))
        if not inside.all():
            ids = unit[~inside]
            e_re.append((np.bincount(ids, weights=e[~inside])[np.unique(ids)],
                         np.bincount(ids, weights=d[~inside])[np.unique(ids)]))
    n_in = sum(len(x) for x, _ in e_in)
    size = round_len * max(1, math.ceil(n_in / (round_len * MAX_BLOCKS)))
    if n_in < MIN_BLOCKS * size:
        size = max(1, n_in // MIN_BLOCKS)
    sums = [(_block_sums(x, size), _block_sums(dd, size)) for x, dd in e_in]
    blocks = np.concatenate([s for s, _ in sums]) if sums else np.zeros(0)
    block_s = np.concatenate([s for _, s in sums]) if sums else np.zeros(0)
    m = len(blocks)
    if m < MIN_BLOCKS:
        return None
    v_in = m * float(np.var(blocks, ddof=1))
    re = np.concatenate([x for x, _ in e_re]) if e_re else np.zeros(0)
    k = len(re)
    v_re, dof_re = 0.0, None
    if k >= 2:
        v_re, dof_re = k * float(np.var(re, ddof=1)), k - 1
    elif k == 1:
        gap_s = float(np.concatenate([g for _, g in e_re])[0])
        rel = float(np.std(blocks, ddof=1) / (rate * block_s.mean())) if rate and block_s.mean() > 0 else 0.0
        v_re = (max(rel, 0.2) * rate * gap_s) ** 2
    v = v_in + v_re
    both = v_in > 0 and dof_re is not None and v_re > 0
    dof = v ** 2 / (v_in ** 2 / (m - 1) + v_re ** 2 / dof_re) if both else m - 1
    return _Spread(math.sqrt(v) / total_d, max(int(dof), 1), m + k, rough=size < round_len)


def steady_rate(t_ns, samples=None, *, ramp: int, workers: int = 0, segments=None, epochs=None) -> SteadyRate:
    """The steady-state rate of sorted hand-off times ``t_ns`` (ns) carrying ``samples`` each (default 1:
    a rate of batches); ``ramp`` batches left out at the start (of each segment, with ``segments``)."""
    t_all = np.asarray(t_ns, dtype=np.float64)
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
    total_n = float(sum(n[st:].sum() for _, n, st in parts))
    total_d = float(sum((t[-1] - t[st - 1]) / 1e9 for t, _, st in parts if st < len(t)))
    if total_d <= 0:
        return SteadyRate(None, None, win_batches, total_n, 0.0, k, skipped_startup, 0, note="no time elapsed")
    rate = total_n / total_d
    if win_batches < MIN_ROUNDS * round_len:
        notes.append(f"window of {win_batches} batches is under {MIN_ROUNDS} rounds of {round_len} workers")
    ep_all = None if epochs is None or segments is not None else np.asarray(epochs)
    with_ep = [(t, n, st, ep_all) for t, n, st in parts]
    spread = _stratified(with_ep, rate, total_d, round_len, round_len)
    if spread is None and ep_all is not None and len(parts) == 1:
        t, n, st = parts[0]
        cyc = _epoch_blocks(t, n, st, ep_all)
        if cyc is not None:
            bn, bd = cyc
            resid = bn - rate * bd
            m = len(bn)
            spread = _Spread(math.sqrt(float((resid ** 2).sum()) / (m * (m - 1))) / (total_d / m), m - 1, m)
    ci, m = None, 0
    if spread is not None:
        m = spread.units
        hw = t975(spread.dof) * spread.se
        ci = (max(rate - hw, 0.0), rate + hw)
        if spread.rough:
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
