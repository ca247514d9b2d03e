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
PHASE_FLOOR = 0.5  # share of a uniform phase's variance always counted for a window cut mid-epoch
PRECISION = 0.03  # the probes' target: a steady rate known to +-3% (95%); wider intervals get a note
# The epoch effect of a window of two epochs is a variance of one degree of freedom, and Student's t of one (12.7)
# made its intervals 2.5-3.1x the runs' own spread for about one point of coverage (benchmarks/calibration_sim.py,
# two-epochs-paced: 5 workers, 64-batch epochs differing 10% in pace, 128 batches; 3 x 200 runs: coverage 89-90%
# -> 88-89%, width 2.5-2.8x -> 1.3x; counted as three: 88%, 1.16x). Shapes of three epochs and more are unchanged.
# Where two epochs' paces differ by 20% no t holds it: 83-84% either way (a note says how long the run would need).
EPOCH_EFFECT_MIN_DOF = 2

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
    se: float | None = None  # standard error of samples_per_s (samples/s)
    dof: int | None = None  # its degrees of freedom
    run_rel_sd: float | None = None  # the run-to-run spread added to ci95 (relative sd)
    within_ci95: tuple[float, float] | None = None  # the interval from this run's hand-offs alone, before it

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
                "startup_batches": self.startup_batches, "blocks": self.blocks, "note": self.note,
                "within_ci95": list(self.within_ci95) if self.within_ci95 else None, "run_rel_sd": self.run_rel_sd}


def interval_note(rel_halfwidth: float | None, target: float = PRECISION, window_s: float | None = None) -> str | None:
    """'within-run interval +-28.8%: the job ended (or the cap stopped it) before +-3%' when the interval is wider
    than ``target``; with ``window_s``, how long a window would reach it (an interval shrinks as one over the
    square root of the window). None otherwise (or without an interval: its own note says why). "Within-run":
    the interval a reported rate shows adds the run-to-run spread (:mod:`lotus.analysis.runspread`), which no
    window narrows; a probe's stop rule judges this one."""
    if rel_halfwidth is None or rel_halfwidth <= target:
        return None
    need = (f" (about {window_s * (rel_halfwidth / target) ** 2:,.0f} s of steady state would reach it)"
            if window_s else "")
    return (f"within-run interval +-{rel_halfwidth:.1%}: the job ended (or the cap stopped it) before "
            f"+-{target * 100:g}%{need}")


_ENDED = {"precision": "precision", "steps": "steps cap", "time": "time cap", "below": "below the best"}


def ended_by(stopped_by: str | None, exit_code: int | None = 0) -> str:
    """Why a probe ended, in words: its interval (``precision``), its caps (``steps cap``, ``time cap``), its
    interval wholly under the rate it had to reach (``below the best``: ``lotus tune``), ``job ended`` (the job
    finished before any of them), ``failed``."""
    if exit_code not in (0, None):
        return "failed"
    return _ENDED.get(stopped_by or "", stopped_by or "job ended")


def _startup(t: np.ndarray, k: int, ep: np.ndarray | None = None) -> int:
    """Leading batches after the ramp (index k on) whose gap dwarfs the window's median gap; not one that
    starts an epoch (``ep``: each hand-off's epoch): that gap is the epoch's restart, which a long run pays
    (with 64-batch epochs and 32 workers the ramp is a whole epoch, and the next one's restart, 2.8 s, was
    left out as start-up: 1,088 samples/s where the run's whole epochs gave 1,000)."""
    gaps = np.diff(t[k - 1:])
    if len(gaps) < 4:
        return 0
    med = float(np.median(gaps))
    s = 0
    while s < min(MAX_STARTUP, len(gaps) - 3) and med > 0 and gaps[s] > STARTUP_FACTOR * med:
        if ep is not None and ep[k + s] != ep[k + s - 1]:
            break
        s += 1
    return s


@dataclass(frozen=True)
class _Spread:
    """The rate's standard error and its degrees of freedom, from the units behind it."""

    se: float
    dof: int
    units: int
    rough: bool = False  # blocks shorter than a round of the workers


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


def _segments(x: np.ndarray, epoch: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sums of ``x`` over blocks of ``size`` consecutive values that never straddle an epoch (an epoch's rest
    joins its last block; an epoch shorter than ``size`` is one block), and each block's epoch."""
    sums, eps = [], []
    cut = np.flatnonzero(np.diff(epoch) != 0) + 1
    for seg_x, seg_e in zip(np.split(x, cut), np.split(epoch, cut), strict=True):
        if not len(seg_x):
            continue
        count = max(len(seg_x) // size, 1)
        edges = np.minimum(size * np.arange(count + 1), len(seg_x))
        edges[-1] = len(seg_x)
        csum = np.concatenate([[0.0], np.cumsum(seg_x)])
        sums.append(csum[edges[1:]] - csum[edges[:-1]])
        eps.append(np.full(count, seg_e[0]))
    return (np.concatenate(sums), np.concatenate(eps)) if sums else (np.zeros(0), np.zeros(0, dtype=np.int64))


def _nested(blocks: np.ndarray, groups: np.ndarray, partial: set) -> tuple[float, list[tuple[float, int]]]:
    """Variance of the sum of ``blocks`` nested in ``groups`` (epochs): one-way random effects,
    ``block = mean + epoch effect + noise``; ``Var(sum) = sum_g n_g^2 s_a^2 + m s_e^2``. The variances are
    estimated on the whole epochs (``partial``: the window's cut first and last epochs, whose blocks are a
    different mix of an epoch's early and late hand-offs) when three or more are whole. Returns it and its
    components with their degrees of freedom (for Welch-Satterthwaite)."""
    m = len(blocks)
    ids, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    if len(ids) < 2 or m == len(ids):  # one epoch, or one block per epoch: blocks are the units
        v = m * float(np.var(blocks, ddof=1))
        return v, [(v, m - 1)]
    whole = np.array([g not in partial for g in ids])
    use = whole if whole.sum() >= 3 and counts[whole].sum() > whole.sum() else np.ones(len(ids), dtype=bool)
    sel = use[inv]
    b, c, g = blocks[sel], counts[use], int(use.sum())
    _, inv_u = np.unique(groups[sel], return_inverse=True)
    mu = int(c.sum())
    means = np.bincount(inv_u, weights=b) / c
    msw = float(((b - means[inv_u]) ** 2).sum()) / (mu - g)
    msb = float((c * (means - b.mean()) ** 2).sum()) / (g - 1)
    n0 = (mu - float((c ** 2).sum()) / mu) / (g - 1)
    s_a = max((msb - msw) / n0, 0.0)
    v_a, v_e = float((counts.astype(np.float64) ** 2).sum()) * s_a, m * msw
    return v_a + v_e, [(v_a, max(g - 1, EPOCH_EFFECT_MIN_DOF)), (v_e, mu - g)]


def _stratified(parts, rate: float, total_d: float, round_len: int, refill: int) -> _Spread | None:
    """Standard error of ``rate`` over the windows of ``parts`` (linearised ratio: per hand-off
    ``e = samples - rate x gap``); three parts, added:

    * hand-offs inside epochs: blocks of whole rounds of the workers (at most :data:`MAX_BLOCKS` in all;
      a round's bursts average out inside a block), nested in their epochs: an epoch's hand-offs share a
      pace (its workers' phases, set by its restart, persist through it; on the GPU host epochs inside one
      run differed by 10-20% while blocks inside an epoch looked independent), so the blocks' variance is
      split into an epoch effect and noise (one-way random effects): ``sum_g n_g^2 s_a^2 + m s_e^2``;
    * epoch restarts: one unit each, the epoch's first ``refill`` hand-offs (a round of the workers: the
      restart gap, then the rest of the first round, which the workers started together deliver as a
      burst), variance ``k x s^2`` of the units' sums. A restart recurs at the same place of every epoch;
      mixed into the blocks, the one or two blocks that hold it widened a steady job's interval several
      times over (the H100 host: +-14-19% where repeated runs agreed within +-2.3%). One restart only: its
      spread is taken as 20% of it (or the blocks' relative spread, if larger);
    * the window's phase: a window of fixed length in time holds one restart more or less depending on
      where it ends, ``(R x excess)^2 / 6`` for a uniform phase (``excess``: a restart's time beyond the
      in-epoch pace), times how random the phase is: ``(2 sd(cycle) sqrt(k) / cycle)^2``, as far as the
      epochs' lengths wander over the window, between :data:`PHASE_FLOOR` and 1 (a window fixed in batches
      has no phase: this part is then conservative; the floor keeps windows of fixed time covered, 93-95% in
      ``benchmarks/calibration_sim.py``).

    Degrees of freedom by Welch-Satterthwaite. None when fewer than :data:`MIN_BLOCKS` blocks inside epochs.
    """
    e_in, e_re, partial, cycles = [], [], set(), []
    for t, n, st, ep in parts:
        if st >= len(t):
            continue
        # per hand-off arrays made in place and dropped once used (the same values: a window of every batch
        # of a 1B-event run is 4.3M of each)
        d = np.diff(t[st - 1:])
        d /= 1e9
        e = rate * d
        np.subtract(n[st:], e, out=e)  # n - rate x gap
        unit = np.full(len(e), -1)  # the restart unit of each hand-off (-1: inside an epoch)
        epoch = np.zeros(len(e), dtype=np.int64) if ep is None else np.asarray(ep[st:], dtype=np.int64)
        if ep is not None:
            starts = np.flatnonzero(ep[st:] != ep[st - 1:-1])
            if len(starts) >= 2:
                cycles.append(np.diff(t[st:][starts]) / 1e9)
            for j, s0 in enumerate(starts):
                unit[s0:s0 + refill] = np.where(unit[s0:s0 + refill] < 0, j, unit[s0:s0 + refill])
        inside = unit < 0
        shift = len(e_in) << 32  # epochs of different parts (segments) are different groups
        if len(epoch):
            partial.update({int(epoch[0]) + shift, int(epoch[-1]) + shift})
        if not inside.all():
            ids = unit[~inside]
            keep = np.unique(ids)
            e_re.append((np.bincount(ids, weights=e[~inside])[keep], np.bincount(ids, weights=d[~inside])[keep],
                         np.bincount(ids, weights=n[st:][~inside])[keep]))
            del ids
        del unit
        e = e[inside]
        d = float(d[inside].sum())  # only their sums are read below
        e_in.append((e, d, float(n[st:][inside].sum()), epoch[inside] + shift))
        del e, d, epoch, inside
    n_in = sum(len(x[0]) for x in e_in)
    size = round_len * max(1, math.ceil(n_in / (round_len * MAX_BLOCKS)))
    if n_in < MIN_BLOCKS * size:
        size = max(1, n_in // MIN_BLOCKS)
    segs = [_segments(x, g, size) for x, _, _, g in e_in]
    blocks = np.concatenate([b for b, _ in segs]) if segs else np.zeros(0)
    groups = np.concatenate([g for _, g in segs]) if segs else np.zeros(0, dtype=np.int64)
    m = len(blocks)
    if m < MIN_BLOCKS:
        return None
    v_in, parts_v = _nested(blocks, groups, partial)
    re = np.concatenate([x[0] for x in e_re]) if e_re else np.zeros(0)
    k = len(re)
    if k >= 2:
        parts_v.append((k * float(np.var(re, ddof=1)), k - 1))
    elif k == 1:  # an assumed spread, not one estimated from a single restart: the blocks' dof
        gap_s = float(e_re[0][1][0])
        rel = math.sqrt(max(v_in, 0.0) / m) / (rate * total_d / m) if rate and total_d > 0 else 0.0
        parts_v.append(((max(rel, 0.2) * rate * gap_s) ** 2, m - 1))
    if k:
        in_s = sum(x[1] for x in e_in)
        pace = sum(x[2] for x in e_in) / in_s if in_s > 0 else rate  # samples/s inside epochs
        re_s = np.concatenate([x[1] for x in e_re])
        re_n = np.concatenate([x[2] for x in e_re])
        excess = float(np.mean(re_s - re_n / pace)) if pace > 0 else 0.0
        cyc = np.concatenate(cycles) if cycles else np.zeros(0)
        # the phase is random only as far as the cycles' lengths wander over the window (+-half a cycle: uniform)
        wander = 2 * float(np.std(cyc, ddof=1)) * math.sqrt(k) / cyc.mean() if len(cyc) >= 2 else 1.0
        spread = min(1.0, max(PHASE_FLOOR, wander ** 2))
        if excess > 0:
            parts_v.append((spread * (rate * excess) ** 2 / 6.0, k - 1 if k >= 2 else m - 1))
    v = sum(x for x, _ in parts_v)
    den = sum(x ** 2 / f for x, f in parts_v if f > 0 and x > 0)
    dof = v ** 2 / den if den > 0 else m - 1
    return _Spread(math.sqrt(v) / total_d, max(int(dof), 1), m + k, rough=size < round_len)


def _segment_parts(t_all: np.ndarray, n_all: np.ndarray, segments):
    """(times, samples) of each segment, in the order of their ids; no segments: the arrays themselves."""
    if segments is None:
        return [(t_all, n_all)] if len(t_all) else []
    seg = np.asarray(segments)
    return ((t_all[seg == sid], n_all[seg == sid]) for sid in (np.unique(seg) if len(seg) else []))


def steady_rate(t_ns, samples=None, *, ramp: int, workers: int = 0, segments=None, epochs=None) -> SteadyRate:
    """The steady-state rate of sorted hand-off times ``t_ns`` (ns) carrying ``samples`` each (default 1:
    a rate of batches); ``ramp`` batches left out at the start (of each segment, with ``segments``)."""
    t_all = np.asarray(t_ns)
    # from the first hand-off, in integer ns first: wall-clock ns in float64 are 256 ns apart (a window's
    # seconds were off by up to half a microsecond: the loop "waited 100.002% of the window")
    if t_all.dtype.kind in "iu" and len(t_all):  # the integer difference, then as float64 (one array made)
        t_all = np.subtract(t_all, t_all[0], out=np.empty(len(t_all), np.float64))
    else:
        t_all = t_all.astype(np.float64)
    n_all = np.ones(len(t_all)) if samples is None else np.nan_to_num(np.asarray(samples, dtype=np.float64))
    round_len = max(int(workers), 1)
    k = max(int(ramp), 1)
    parts, skipped_startup, notes = [], 0, []
    ep_all = None if epochs is None or segments is not None else np.asarray(epochs)
    for t, n in _segment_parts(t_all, n_all, segments):
        kk = k
        if len(t) < k + 2:
            if len(t) < 2 or segments is not None:
                continue
            kk = max(1, len(t) - 2) if len(t) > 2 else 1
            notes.append(f"only {len(t)} batches, fewer than the ramp of {k} and two more: {kk} left out, "
                         "the rate includes prefetched batches (too short to trust)")
        s = _startup(t, kk, ep_all if ep_all is not None and len(ep_all) == len(t) else None)
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
    with_ep = [(t, n, st, ep_all) for t, n, st in parts]
    spread = _stratified(with_ep, rate, total_d, round_len, round_len)
    if spread is None and ep_all is not None and len(parts) == 1:  # epochs of a batch or two: whole epochs
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
    wide = interval_note((ci[1] - rate) / rate if ci and rate else None, window_s=total_d)
    if wide:
        notes.append(wide)
    return SteadyRate(rate, ci, win_batches, total_n, total_d, k, skipped_startup, m,
                      note="; ".join(notes) or None, se=spread.se if spread else None,
                      dof=spread.dof if spread else None)
