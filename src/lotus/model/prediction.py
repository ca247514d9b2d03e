"""What the model predicts of one configuration (:class:`Prediction`): made by :mod:`lotus.model.engine`,
returned by :meth:`lotus.model.params.PipelineModel.predict`. Imports nothing of lotus.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Prediction:
    """What the model expects of one configuration. ``samples_per_s`` None: see ``reason``."""

    num_workers: int
    cpus: float | None
    batch_size: int
    prefetch_factor: int
    cache_hit_rate: float | None
    samples_per_s: float | None
    wait_share: float | None
    bottleneck: str | None  # "preprocessing: <op>", "step (GPU/model)", "I/O (cold reads)", "main process", "CPUs"
    within_epoch_samples_per_s: float | None = None  # inside an epoch, restarts left out
    input_samples_per_s: float | None = None  # the most the workers can deliver
    step_samples_per_s: float | None = None  # the most the loop can consume
    busy_workers: float | None = None
    cpu_stretch: float | None = None
    # "upper" / "lower": the configuration time-slices its CPUs more / less than the runs did, and what slicing
    # costs was not fitted (lotus.model.engine.slicing_bound): the rate is at most / at least this
    bound: str | None = None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


BOTTLENECKS = ("preprocessing: <op>", "step (GPU/model)", "I/O (cold reads)", "main process", "CPUs")
