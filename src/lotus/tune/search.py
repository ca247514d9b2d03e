"""The search over num_workers: the model proposes, probes verify (pure: no processes, no fitting here).

A :class:`Session` wraps two callables, so that the search runs the same on real probes
(:mod:`lotus.tune.tuner`: :func:`lotus.launch.launch` and :func:`lotus.model.fit`) and on fakes of known
truth (tests):

* ``probe(settings, phase, steps, below=None) -> Measurement``: run the job once with these DataLoader settings
  (``below``: samples/s of one rank under which the probe cannot be chosen: it may end once it is shown
  below it, see :mod:`lotus.dataloader.probe`);
* ``fit(measurements) -> model | None``: a model fitted on every successful probe so far, with
  ``model.predict(num_workers, cpus, prefetch_factor=...) -> Prediction`` (``samples_per_s``,
  ``wait_share``, ``input_samples_per_s``).

:func:`search_workers`: predict every candidate worker count, probe the model's proposal (the smallest
count within ``near_best`` of the best predicted: free CPUs are worth something), refit on every probe,
then check the neighbours of the measured best, unless the model held at every probe that checked it (its
prediction, made before the probe, within ``tolerance``) and rates them no better; stop when they were checked
(or answered for) and the model has nothing better to show (see :func:`next_workers`), or when the budget
(time, probes) is spent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lotus.tune.types import LoaderSettings, Measurement

_log = logging.getLogger("lotus.tune")


class Budget:
    """Seconds and probes left. ``clock`` is injectable (tests advance a fake one)."""

    def __init__(self, seconds: float | None, max_probes: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.seconds, self.max_probes, self.clock = seconds, max_probes, clock
        self.start_s = clock()
        self.probes = 0

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.start_s

    def allows(self, estimate_s: float | None) -> bool:
        """Whether a probe expected to take ``estimate_s`` fits in what is left."""
        if self.max_probes is not None and self.probes >= self.max_probes:
            return False
        if self.seconds is None:
            return True
        return self.seconds - self.elapsed_s >= (estimate_s or 0.0)


@dataclass
class Entry:
    name: str
    phase: str
    measurement: Measurement
    predicted_samples_per_s: float | None


@dataclass
class Session:
    """Probes run so far, the model fitted on them, and the budget."""

    probe: Callable[..., Measurement]
    fit: Callable[[list[Measurement]], object]
    cpus: float  # CPUs the job may use (all ranks)
    budget: Budget
    entries: list[Entry] = field(default_factory=list)
    model: object = None
    notes: list[str] = field(default_factory=list)
    ranks: int = 1

    @property
    def cpus_per_rank(self) -> float:
        return self.cpus / max(self.ranks, 1)

    def measure(self, settings: LoaderSettings, phase: str, *, steps: int | None = None,
                predicted: float | None = None, force: bool = False, below: float | None = None) -> Measurement | None:
        """Run one probe (None: the budget does not allow it; ``force``: run it anyway). ``below``: the job's
        samples/s under which this probe cannot win (:func:`stop_below`): it may end once shown under it."""
        if not force and not self.budget.allows(self.expected_s(steps)):
            return None
        self.budget.probes += 1
        extra = {"below": below / max(self.ranks, 1)} if below else {}
        m = self.probe(settings, phase, steps, **extra)
        name = f"p{len(self.entries):02d}-{phase}"
        self.entries.append(Entry(name, phase, m, predicted))
        if m.ok:
            self.refit()
        elif phase not in ("baseline", "control"):  # those two say their failure themselves
            why = f"exit code {m.exit_code}" if m.exit_code else "no samples/s in its trace"
            _log.warning("probe %s (%s) failed: %s; the search goes on without it", name, settings.label(), why)
        return m

    def expected_s(self, steps: int | None = None) -> float | None:
        """How long the next probe should take: the median of the probes so far (scaled for more steps)."""
        walls = sorted(e.measurement.wall_s for e in self.entries if e.measurement.wall_s > 0)
        if not walls:
            return None
        median = walls[len(walls) // 2]
        base = next((e.measurement.steps for e in self.entries if e.measurement.steps), None)
        return median * (steps / base if steps and base and steps > base else 1.0)

    def refit(self) -> None:
        ok = [e.measurement for e in self.entries if e.measurement.ok]
        if not ok:
            return
        try:
            self.model = self.fit(ok)
        except Exception as exc:  # a model that cannot be fitted leaves the probes to decide
            note = f"the model could not be fitted ({exc}); probes alone decide"
            if note not in self.notes:
                self.notes.append(note)
            _log.warning("%s", note)
            self.model = None

    def predict(self, num_workers: int, prefetch_factor: int | None = None):
        if self.model is None:
            return None
        try:
            p = self.model.predict(num_workers, self.cpus_per_rank, prefetch_factor=prefetch_factor)
        except Exception as exc:
            _log.debug("prediction at %d workers failed: %r", num_workers, exc)
            return None
        return p if getattr(p, "samples_per_s", None) else None

    def rate(self, num_workers: int, prefetch_factor: int | None = None) -> float | None:
        """Predicted samples/s of the whole job (all ranks)."""
        p = self.predict(num_workers, prefetch_factor)
        return p.samples_per_s * max(self.ranks, 1) if p is not None else None


def worker_candidates(cpus_per_rank: float, max_workers: int | None = None) -> list[int]:
    """0 .. 2x the CPUs (or ``max_workers``): every count up to 32, then every ``top // 16``-th."""
    top = int(max_workers if max_workers is not None else max(2 * round(cpus_per_rank), 1))
    if top <= 32:
        return list(range(top + 1))
    step = max(1, top // 16)
    return sorted(set(range(17)) | set(range(16, top + 1, step)) | {top})


def neighbour_step(w: int) -> int:
    """How far the neighbours of a worker count are: 1 up to 15, then about 1/8 of it."""
    return max(1, w // 8)


def model_held(checks: list[tuple[float, float]], tolerance: float) -> tuple[bool, str]:
    """Whether every probe's prediction, made before the probe (``(predicted, measured)`` pairs), was within
    ``tolerance`` of what it measured; at least one such check is needed."""
    errs = [p / m - 1 for p, m in checks if p and m]
    if not errs:
        return False, "no probe checked the model yet"
    return all(abs(e) <= tolerance for e in errs), ", ".join(f"{e:+.1%}" for e in errs)


def next_workers(measured: dict[int, float], failed: set[int], predicted: dict[int, float],
                 candidates: list[int], tolerance: float, near_best: float,
                 checks: list[tuple[float, float]] | None = None) -> tuple[int | None, str]:
    """The worker count to probe next, or None and why the search is over.

    1. the model's proposal (the smallest count within ``near_best`` of the best prediction), if not probed;
    2. the unprobed neighbours of the measured best (the one the model rates higher first), unless the model
       held at every probe that checked it (``checks``: predictions made before each probe, all within
       ``tolerance``) and rates no unprobed neighbour above its own prediction at the measured best by more
       than ``near_best``: then the model answers for them;
    3. an unprobed count the model rates ``tolerance`` above its own prediction at the measured best.
    """
    done = set(measured) | failed
    if predicted:
        top = max(predicted.values())
        proposal = min(w for w, r in predicted.items() if r >= (1 - near_best) * top)
        if proposal not in done:
            return proposal, "proposal"
    if not measured:
        rest = [w for w in candidates if w not in done]
        return (rest[0], "first") if rest else (None, "every candidate failed")
    best = max(measured, key=lambda w: (measured[w], -w))
    h = neighbour_step(best)
    below = [c for c in candidates if c <= best - h]
    above = [c for c in candidates if c >= best + h]
    near = [w for w in ((max(below),) if below else ()) + ((min(above),) if above else ()) if w not in done]
    held, errs = model_held(checks or [], tolerance)
    if near and held and best in predicted and all(
            w in predicted and predicted[w] <= predicted[best] * (1 + near_best) for w in near):
        return None, (f"converged: the model held at every probe that checked it ({errs}) and rates the unprobed "
                      f"neighbours ({', '.join(map(str, sorted(near)))}) no better than the measured best")
    if near:
        return max(near, key=lambda w: (predicted.get(w, 0.0), -w)), "neighbour"
    if predicted and best in predicted:
        ref = predicted[best]
        better = [w for w, r in predicted.items() if w not in done and r > ref * (1 + tolerance)]
        if better:
            return max(better, key=lambda w: predicted[w]), "model points elsewhere"
        err = abs(ref - measured[best]) / measured[best]
        if err <= tolerance:
            return None, f"converged: neighbours checked, prediction within {err:.0%} of the measured best"
        return None, (f"neighbours checked; the model is {err:.0%} off at the measured best and shows nothing "
                      "better: the probes decide")
    return None, "neighbours checked (no model prediction)"


EQUIVALENT = 0.05  # a cheaper setting whose intervals overlap the best's is taken only this close to it


def indistinct(rate: float, ci, best_rate: float, best_ci, near_best: float) -> bool:
    """Whether a measured rate cannot be told apart from the best: inside ``near_best`` of it, or (both with
    intervals) its interval reaching the best's while its own rate is within :data:`EQUIVALENT` of the best.
    The second condition keeps a probe with an interval too wide to say anything (on the GPU host, a 7-worker
    probe read 1,194 samples/s, 95% CI 0-4,457, against the best's 1,574) from winning as "the cheapest of the
    equals"."""
    if rate >= (1 - near_best) * best_rate:
        return True
    return bool(ci and best_ci and ci[1] >= best_ci[0] and rate >= (1 - EQUIVALENT) * best_rate)


def stop_below(rate: float | None, ci, near_best: float) -> float | None:
    """The samples/s under which a probe cannot be told apart from a best of ``rate`` (interval ``ci``) in the
    sense of :func:`indistinct`: a probe whose whole interval lies under it is worse whatever more batches say
    (its rate is under ``(1 - near_best) x rate`` and either its interval under the best's or its rate more
    than :data:`EQUIVALENT` under it)."""
    if not rate:
        return None
    low = (1 - near_best) * rate
    return max(min(low, ci[0]), (1 - max(EQUIVALENT, near_best)) * rate) if ci else low


def choose(measured: dict[int, float], near_best: float, intervals: dict | None = None) -> int:
    """The smallest measured count that cannot be told apart from the best measured rate (within ``near_best``
    of it, or its 95% interval reaching the best's and its rate within :data:`EQUIVALENT`): the cheapest of
    the equals."""
    intervals = intervals or {}
    top = max(measured, key=lambda w: (measured[w], -w))
    return min(w for w, r in measured.items()
               if indistinct(r, intervals.get(w), measured[top], intervals.get(top), near_best))


def unsettled(measured: dict[int, float], intervals: dict, best: int) -> list[int]:
    """The measured counts that may be more than :data:`EQUIVALENT` faster than the chosen ``best``: their 95%
    interval reaches above it by that much. Empty: the choice holds to EQUIVALENT as far as the probes can tell
    (the chosen count's own interval may be wide: the others are still shown under it)."""
    top = measured[best] * (1 + EQUIVALENT)
    return sorted(w for w, r in measured.items() if w != best and (ci := intervals.get(w)) and ci[1] > top)


@dataclass
class WorkersOutcome:
    best_workers: int
    measured: dict[int, float]
    stopped: str
    predicted_samples_per_s: float | None
    unsettled: list[int] = field(default_factory=list)  # counts that may beat the choice by more than EQUIVALENT


def search_workers(s: Session, baseline: Measurement, *, candidates: list[int], tolerance: float = 0.05,
                   near_best: float = 0.02, fixed: LoaderSettings | None = None) -> WorkersOutcome:
    """num_workers: model proposals verified by probes (see the module doc). ``baseline`` is measured;
    ``fixed``: other settings every probe forces (then the baseline is not one of the measured points)."""
    fixed = fixed or LoaderSettings()
    measured: dict[int, float] = {}
    intervals: dict[int, tuple[float, float] | None] = {}
    failed: set[int] = set()
    w0 = baseline.effective.num_workers if baseline.effective else None
    if w0 is not None and baseline.ok and fixed == LoaderSettings():
        measured[w0], intervals[w0] = baseline.samples_per_s, baseline.ci95
        if w0 not in candidates:
            candidates = sorted({*candidates, w0})
    stopped = ""
    while True:
        predicted = {w: r for w in candidates if (r := s.rate(w)) is not None}
        checks = [(e.predicted_samples_per_s, e.measurement.samples_per_s) for e in s.entries
                  if e.phase == "num_workers" and e.measurement.ok and e.predicted_samples_per_s]
        nxt, why = next_workers(measured, failed, predicted, candidates, tolerance, near_best, checks)
        if nxt is None:
            stopped = why
            break
        _log.info("num_workers=%d next (%s; predicted %s samples/s)", nxt, why,
                  f"{predicted[nxt]:,.1f}" if nxt in predicted else "-")
        top = max(measured, key=lambda w: (measured[w], -w)) if measured else None
        below = stop_below(measured[top], intervals.get(top), near_best) if top is not None else None
        m = s.measure(fixed.with_(num_workers=nxt), "num_workers", predicted=predicted.get(nxt), below=below)
        if m is None:
            stopped = "budget spent"
            break
        if m.ok:
            if nxt not in measured or m.samples_per_s > measured[nxt]:
                measured[nxt], intervals[nxt] = m.samples_per_s, m.ci95
        else:
            failed.add(nxt)
    if not measured:
        return WorkersOutcome(w0 if w0 is not None else 0, measured, stopped or "no probe succeeded", None)
    best = choose(measured, near_best, intervals)
    top = max(measured, key=lambda w: (measured[w], -w))
    if best != top:
        ci = intervals.get(top)
        band = f" (95% CI {ci[0]:,.1f}-{ci[1]:,.1f})" if ci else f" (within {near_best:.0%})"
        s.notes.append(f"num_workers: {best} chosen, the fewest workers that cannot be told apart from the fastest "
                       f"probe ({top} workers, {measured[top]:,.1f} samples/s{band}; {best} workers "
                       f"{measured[best]:,.1f})")
    open_ = unsettled(measured, intervals, best)
    if open_:
        reach = [intervals[w][1] for w in open_]
        widths = [(ci[1] - ci[0]) / 2 / measured[w] for w, ci in intervals.items() if ci and measured.get(w)]
        lo_w, hi_w = f"+-{min(widths):.0%}", f"+-{max(widths):.0%}"
        span = lo_w if lo_w == hi_w else f"{lo_w} to {hi_w}"
        s.notes.append(
            f"num_workers: not settled: {', '.join(map(str, open_))} worker(s) may be more than {EQUIVALENT:.0%} "
            f"faster than the chosen {best} (their 95% intervals reach {min(reach):,.0f}-{max(reach):,.0f} samples/s "
            f"against {measured[best]:,.1f}); the probes' intervals are {span}: "
            "this job's rate varies more within a probe than the settings differ. Longer probes (--max-seconds) "
            "would tell (each probe's note says how long it would need for +-3%)")
    return WorkersOutcome(best, measured, stopped, s.rate(best), open_)


__all__ = ["EQUIVALENT", "Budget", "Entry", "Session", "WorkersOutcome", "choose", "model_held", "neighbour_step",
           "next_workers", "search_workers", "stop_below", "unsettled", "worker_candidates"]
