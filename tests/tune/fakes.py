"""A fake job of known truth and fake models of it, for the search without processes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

from lotus.tune.types import EpochFacts, LoaderSettings, Measurement

CPUS = 8.0


def truth(w: int, pf: int = 2, pin: bool = False, pf_gain: float = 0.10) -> float:
    """samples/s at ``w`` workers: per-worker 150/s with 8 % contention, oversubscribed beyond 6 (1 CPU for the
    loop): best at 6 (643/s); prefetch 4 adds ``pf_gain`` (10 %: bursty arrivals), 8 nothing more; pinning 5 %."""
    if w == 0:
        rate = 100.0
    else:
        k = min(w, 6)
        rate = k * 150.0 / (1 + 0.08 * (k - 1))
        rate *= 1 - 0.04 * max(w - 6, 0)
    if w and pf >= 4:
        rate *= 1 + pf_gain
    if pin:
        rate *= 1.05
    return rate


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class FakeJob:
    """``probe(settings, phase, steps)``: the truth (times ``noise``), ``wall_s`` seconds per probe."""

    own: LoaderSettings = field(default_factory=lambda: LoaderSettings(num_workers=2, prefetch_factor=2,
                                                                       pin_memory=False, persistent_workers=False))
    clock: FakeClock = field(default_factory=FakeClock)
    wall_s: float = 10.0
    noise: float = 0.0
    crash_at: set = field(default_factory=set)  # worker counts whose probe crashes
    cuda: bool = False
    wait_share: float = 0.2
    batches_per_epoch: int | None = 10
    restart_s: float = 0.5  # extra time of an epoch start without persistent workers
    traced: bool = True
    default_steps: int | None = None  # a probe's steps when the search does not say (None: no epoch crossed)
    pf_gain: float = 0.10  # what prefetch_factor >= 4 adds
    ci_rel: float | None = None  # each probe's 95% interval: +-this share of its rate (None: no interval)
    calls: list = field(default_factory=list)
    belows: list = field(default_factory=list)  # the ``below`` of each call (None: not passed)
    seed: int = 0

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def __call__(self, settings: LoaderSettings, phase: str, steps: int | None = None,
                 below: float | None = None) -> Measurement:
        steps = steps or self.default_steps
        eff = settings.over(self.own)
        self.calls.append((phase, eff, steps))
        self.belows.append(below)
        wall = self.wall_s
        if below is not None and self.ci_rel is not None:  # a probe shown worse ends early (a third of the time)
            r = truth(eff.num_workers, eff.prefetch_factor or 2, bool(eff.pin_memory), self.pf_gain)
            if r * (1 + self.ci_rel) < below:
                wall = self.wall_s / 3
        self.clock.t += wall
        if eff.num_workers in self.crash_at and phase != "baseline":
            return Measurement(settings=settings, samples_per_s=None, wall_s=self.wall_s, exit_code=1,
                               stderr_tail="Traceback ...\nRuntimeError: worker killed (out of memory)", steps=steps)
        if not self.traced:
            return Measurement(settings=settings, samples_per_s=None, wall_s=self.wall_s, traced=False, steps=steps)
        rate = truth(eff.num_workers, eff.prefetch_factor or 2, bool(eff.pin_memory), self.pf_gain)
        rate *= 1 + self.rng.uniform(-self.noise, self.noise)
        crossed = 1 if steps and self.batches_per_epoch and steps > self.batches_per_epoch else 0
        interval = 4 / rate
        extra = (0.02 if eff.persistent_workers else self.restart_s) if crossed else None
        epochs = EpochFacts(batches_per_epoch=self.batches_per_epoch, startup_s=self.restart_s + 0.05,
                            boundary_extra_s=extra, batch_interval_s=interval, batch_prep_s=0.05,
                            epochs_crossed=crossed)
        wait = self.wait_share if eff.num_workers else 0.9
        ci = (rate * (1 - self.ci_rel), rate * (1 + self.ci_rel)) if self.ci_rel is not None else None
        return Measurement(settings=settings, samples_per_s=rate, wait_share=wait, wall_s=wall,
                           effective=eff, cuda=self.cuda, epochs=epochs, steps=steps, ci95=ci,
                           stopped_by="below" if wall < self.wall_s else None)


class FakeModel:
    """Predicts ``truth`` distorted by ``shape`` (a function of w and the number of distinct probed counts) and
    ``scale``; ``input_samples_per_s``: the workers' capacity (truth without the prefetch bonus, x1.5)."""

    def __init__(self, measurements, shape=None, scale: float = 1.0, learn_after: int = 2):
        self.ws = {m.settings.over(m.effective).num_workers for m in measurements}
        self.shape, self.scale, self.learn_after = shape, scale, learn_after

    def predict(self, num_workers, cpus, prefetch_factor=None, **kw):
        w = int(num_workers)
        rate = truth(w, prefetch_factor or 2) * self.scale
        if self.shape is not None and len(self.ws) < self.learn_after:
            rate = self.shape(w) * self.scale
        return SimpleNamespace(samples_per_s=rate, wait_share=0.1, input_samples_per_s=truth(w) * 1.5,
                               bottleneck="CPUs")


def optimistic(w: int) -> float:
    """A one-run model: no contention, linear up to the CPUs less one (7), flat after."""
    return 100.0 if w == 0 else 150.0 * min(w, 7)


def fitter(**kw):
    return lambda ms: FakeModel(ms, **kw)
