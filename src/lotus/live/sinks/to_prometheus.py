"""Prometheus: an HTTP endpoint served by the official client, one custom collector over the latest values.

Gauges named by Prometheus conventions (base units, ratios 0..1), one series per (rank, loader) with the
labels ``rank``, ``loader`` (its name), ``loader_id`` and ``host``; the slowest op's ratio also carries
``op``. A series appears once its value is known (no GPU-idle series without CUDA events). The sidecar
reads every rank's files of the run directory, so one endpoint serves all ranks of a torchrun job.
"""

from __future__ import annotations

from lotus.live.sinks.options import parse_address
from lotus.live.sinks.values import LoaderValues, RunValues

LABELS = ("rank", "loader", "loader_id", "host")

# name -> (help, value of a LoaderValues); all gauges
GAUGES = {
    "lotus_samples_per_second": ("Samples per second handed to the training loop (steady rate over the window).",
                                 lambda v: v.samples_per_s),
    "lotus_samples_per_second_ci95_low": ("Lower end of the 95% interval of lotus_samples_per_second.",
                                          lambda v: v.ci95[0] if v.ci95 else None),
    "lotus_samples_per_second_ci95_high": ("Upper end of the 95% interval of lotus_samples_per_second.",
                                           lambda v: v.ci95[1] if v.ci95 else None),
    "lotus_loader_wait_ratio": ("Share of the window the training loop waited for data (0..1).",
                                lambda v: v.wait_share),
    "lotus_worker_busy_ratio": ("Mean share of the window the loader's workers spent preparing batches (0..1).",
                                lambda v: v.worker_busy_share),
    "lotus_gpu_idle_from_data_ratio": ("Share of the window the GPU sat idle waiting for data (0..1).",
                                       lambda v: v.gpu_idle_share),
    "lotus_loader_epoch": ("The loader's latest epoch.", lambda v: v.epoch),
}


def _labels(v: LoaderValues) -> list[str]:
    return [str(v.rank), v.name, str(v.loader), v.host]


class _Collector:
    """Yields the metric families of the latest values (set by the publisher thread, read by scrapes)."""

    def __init__(self) -> None:
        self.values: RunValues | None = None

    def describe(self):
        return self._families(None)

    def collect(self):
        return self._families(self.values)

    @staticmethod
    def _families(values: RunValues | None):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        loaders = values.loaders if values is not None else []
        out = []
        for name, (text, get) in GAUGES.items():
            g = GaugeMetricFamily(name, text, labels=LABELS)
            for v in loaders:
                x = get(v)
                if x is not None:
                    g.add_metric(_labels(v), float(x))
            out.append(g)
        op = GaugeMetricFamily("lotus_slowest_op_ratio", "Share of the workers' fetch time the slowest op took (0..1).",
                               labels=(*LABELS, "op"))
        batches = CounterMetricFamily("lotus_loader_batches", "Batches the training loop received from the loader.",
                                      labels=LABELS)
        for v in loaders:
            if v.slowest_op and v.slowest_op_share is not None:
                op.add_metric([*_labels(v), v.slowest_op], float(v.slowest_op_share))
            batches.add_metric(_labels(v), float(v.batches))
        running = GaugeMetricFamily("lotus_job_running", "1 while the traced job runs, 0 after it ended.")
        updated = GaugeMetricFamily("lotus_last_update_timestamp_seconds", "Unix time of the latest values.")
        if values is not None:
            running.add_metric([], 1.0 if values.live else 0.0)
            updated.add_metric([], values.wall_s)
        return [*out, op, batches, running, updated]


class PrometheusSink:
    name = "prometheus"

    def __init__(self, address: str):
        from prometheus_client import CollectorRegistry, start_http_server

        host, port = parse_address(address)
        self.collector = _Collector()
        registry = CollectorRegistry()
        registry.register(self.collector)
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise OSError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
        self.port = self.server.server_address[1]

    def publish(self, values: RunValues) -> None:
        self.collector.values = values

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
