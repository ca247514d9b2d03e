"""lotus.live.sinks: the live numbers of ``lotus top`` published where people already look.

TensorBoard scalars, a Prometheus endpoint, Weights & Biases, from a sidecar process that follows the
trace files as they are written (:class:`lotus.live.Tailer`): the training process does no extra work
for them, and a sink that fails or stalls cannot fail or stall the job. See docs/live-sinks.md.

Layer: above :mod:`lotus.live` (the tailer, ``snapshot``) and :mod:`lotus.analysis.steady` (the one
throughput measure); the sink packages (tensorboard, prometheus_client, wandb) are optional and imported
only in the sidecar, by the module of their sink.

* :mod:`~lotus.live.sinks.options`: :class:`SinkOptions` (what ``lotus run --tensorboard/--prometheus/--wandb``,
  ``DataLoader(live_sinks=...)`` and ``LOTUS_TENSORBOARD``... ask for);
* :mod:`~lotus.live.sinks.values`: what is published (per rank and loader; the main loader combined);
* :mod:`~lotus.live.sinks.publisher`: the sidecar's loop, one thread per sink;
* :mod:`~lotus.live.sinks.spawn`: starting the sidecar (``python -m lotus.live.sinks``).
"""

from __future__ import annotations

from lotus.live.sinks.options import SinkOptions

__all__ = ["SinkOptions"]
