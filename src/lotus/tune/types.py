"""Typed values of :mod:`lotus.tune`: DataLoader settings, one probe's measurement, the tuning result.

Units are in the field names (``_s`` seconds, ``samples_per_s``). ``None`` in a :class:`LoaderSettings`
means "the job's own setting" (nothing forced); a :class:`Measurement` also says what the loader
actually ran with (``effective``, from the trace's loader description).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from lotus.errors import LotusError

SETTINGS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")


class TuneError(LotusError):
    """Tuning cannot start or go on: the job's own run failed, or it creates no DataLoader."""

    def __init__(self, message: str, *, exit_code: int | None = None, stderr_tail: str = "",
                 trace_dir: str | None = None):
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        self.trace_dir = trace_dir


@dataclass(frozen=True)
class LoaderSettings:
    """DataLoader settings; ``None``: the job's own (not forced)."""

    num_workers: int | None = None
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None

    def with_(self, **changes) -> LoaderSettings:
        return replace(self, **changes)

    def loader_args(self) -> dict:
        """What to force besides num_workers (``LaunchOptions.loader_args``); nothing for 0 workers."""
        if self.num_workers == 0:
            return {k: v for k, v in (("pin_memory", self.pin_memory),) if v is not None}
        return {k: getattr(self, k) for k in SETTINGS[1:] if getattr(self, k) is not None}

    def over(self, base: LoaderSettings) -> LoaderSettings:
        """These settings where given, ``base``'s elsewhere (0 workers: no prefetch, not persistent)."""
        out = LoaderSettings(**{k: getattr(self, k) if getattr(self, k) is not None else getattr(base, k)
                                for k in SETTINGS})
        if out.num_workers == 0:
            out = replace(out, prefetch_factor=None, persistent_workers=False)
        return out

    def to_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        def v(x):
            return "-" if x is None else ("y" if x is True else "n" if x is False else str(x))

        return (f"w={v(self.num_workers)} pf={v(self.prefetch_factor)} pin={v(self.pin_memory)} "
                f"persist={v(self.persistent_workers)}")

    def snippet(self) -> str:
        """``DataLoader(..., num_workers=6, prefetch_factor=4, ...)``."""
        parts = [f"num_workers={self.num_workers}"]
        if self.num_workers:
            parts.append(f"prefetch_factor={self.prefetch_factor if self.prefetch_factor is not None else 2}")
        parts.append(f"pin_memory={bool(self.pin_memory)}")
        if self.num_workers:
            parts.append(f"persistent_workers={bool(self.persistent_workers)}")
        return f"DataLoader(..., {', '.join(parts)})"


@dataclass
class EpochFacts:
    """What a trace says about epoch starts (seconds)."""

    batches_per_epoch: int | None = None  # dataset length / batch size (None: unknown, e.g. iterable)
    startup_s: float | None = None  # epoch 0: iterator created -> first batch consumed
    boundary_extra_s: float | None = None  # epochs >= 1: gap between epochs minus one steady batch interval
    batch_interval_s: float | None = None  # steady time per batch of the loop
    batch_prep_s: float | None = None  # median preparation time of one batch (one worker)
    epochs_crossed: int = 0  # epoch boundaries the probe crossed


@dataclass
class Measurement:
    """One probe of the job (or a fake one in tests)."""

    settings: LoaderSettings  # what was forced
    samples_per_s: float | None  # steady state (lotus.analysis.throughput)
    wait_share: float | None = None
    ci95: tuple[float, float] | None = None  # 95% interval of samples_per_s
    stopped_by: str | None = None  # why the probe ended: steps (its cap), precision, time, below
    wall_s: float = 0.0
    exit_code: int = 0
    effective: LoaderSettings | None = None  # what the main loader ran with (trace's loader description)
    traced: bool = True  # False: the job created no DataLoader
    cuda: bool | None = None  # GPU events in the trace: CUDA was used by the job
    epochs: EpochFacts = field(default_factory=EpochFacts)
    trace_dir: str | None = None
    stderr_tail: str = ""
    steps: int | None = None
    note: str | None = None  # the rate's note (an interval wider than the target, a short window...)
    ranks: int = 1  # processes with a traced loader (torchrun ranks)
    run: object = field(default=None, repr=False)  # what the model is fitted on (a RunTrace), if any
    in_series: int | None = None  # its place among the probes run in the job's one process (None: a process of its own)
    within_rel_halfwidth: float | None = None  # the 95% half-width of the run alone (before the run-to-run spread)
    started_unix_s: float | None = None  # when the probe started (wall clock)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.traced and self.samples_per_s is not None and self.samples_per_s > 0


@dataclass
class ProbeRecord:
    """One probe as reported: settings, measured and predicted samples/s, wait share, failure."""

    name: str
    phase: str  # baseline | num_workers | prefetch_factor | pin_memory | persistent_workers | control
    settings: dict  # effective settings (the job's own where nothing was forced)
    forced: dict  # what the probe forced
    samples_per_s: float | None
    predicted_samples_per_s: float | None
    wait_share: float | None
    wall_s: float
    exit_code: int
    failed: bool
    steps: int | None = None
    trace_dir: str | None = None
    stderr_tail: str = ""
    ci95: list[float] | None = None  # 95% interval of samples_per_s
    stopped_by: str | None = None  # why the probe ended: steps (its cap), precision, time, below
    note: str | None = None  # the rate's note (an interval wider than the target, a short window...)
    model_error: float | None = None  # predicted (before the probe) / measured - 1
    loo_error: float | None = None  # the model of every other probe of the worker search / measured - 1
    disagrees: bool = False  # the model is off by more than this probe's interval + 10%
    in_series: int | None = None  # its place among the probes run in the job's one process (None: its own process)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TuneResult:
    """What ``lotus tune`` found (``to_dict``: the JSON of ``lotus tune --json``)."""

    command: list[str]
    best: LoaderSettings
    samples_per_s: float | None  # measured, the best probe
    baseline: LoaderSettings
    baseline_samples_per_s: float | None
    predicted_samples_per_s: float | None = None  # the model's, at the best worker count
    probes: list[ProbeRecord] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str = ""  # why the worker search ended
    out: str | None = None
    cpus: int | None = None
    notes: list[str] = field(default_factory=list)
    epoch_gain: float | None = None  # persistent_workers: share of an epoch's time saved (estimate or measured)
    ci95: tuple[float, float] | None = None  # of samples_per_s
    baseline_ci95: tuple[float, float] | None = None  # of baseline_samples_per_s
    model_check: dict | None = None  # lotus.model.check.ModelCheck of the worker search's probes
    unsettled_workers: list[int] | None = None  # measured counts that may beat the choice by > 5% (None: not searched)
    control: dict | None = None  # lotus.analysis.runspread.Control: one setting measured again at the end

    @property
    def settled(self) -> bool | None:
        """Whether the worker choice holds to 5% as far as the probes can tell (None: num_workers not searched)."""
        return None if self.unsettled_workers is None else not self.unsettled_workers

    @property
    def gain(self) -> float | None:
        if not self.samples_per_s or not self.baseline_samples_per_s:
            return None
        return self.samples_per_s / self.baseline_samples_per_s

    def to_dict(self) -> dict:
        return {"best": self.best.to_dict(), "samples_per_s": self.samples_per_s,
                "ci95": list(self.ci95) if self.ci95 else None,
                "baseline_samples_per_s": self.baseline_samples_per_s,
                "baseline_ci95": list(self.baseline_ci95) if self.baseline_ci95 else None, "gain": self.gain,
                "baseline": self.baseline.to_dict(), "predicted_samples_per_s": self.predicted_samples_per_s,
                "snippet": self.best.snippet(), "probes": [p.to_dict() for p in self.probes],
                "seconds": self.seconds, "stopped": self.stopped, "epoch_gain": self.epoch_gain,
                "cpus": self.cpus, "out": self.out, "command": self.command, "notes": self.notes,
                "model_check": self.model_check, "settled": self.settled,
                "unsettled_workers": self.unsettled_workers, "control": self.control}


__all__ = ["SETTINGS", "EpochFacts", "LoaderSettings", "Measurement", "ProbeRecord", "TuneError", "TuneResult"]
