"""A traced run's storage time at other numbers of workers, from a replay of its reads.

A fetch that reads from storage (trace format >= 5: its thread's ``read_bytes``, :mod:`lotus.dataloader.schedstat`)
spends part of its time off a CPU waiting for the device; the traced run measures that time at its own
number of workers only. Whether more workers get more out of the storage (a device with queue depth to
spare, a network store's latency) or none (a saturated disk, a throughput-capped cloud volume) no single
run tells. :func:`scale_by_replay` reads the dataset's files as the workers do (``lotus.profile.diskprobe``:
N threads, whole files, the workers' CPU time between two reads as a pause) at the traced number of
workers (every traced run's) and at each asked one, and sets the model's ``io_scale``: the mean time to read
a file at N readers; a batch traced at ``w`` workers spends ``io_scale[n] / io_scale[w]`` times its storage
time at ``n`` (:func:`lotus.model.engine.predict`). The replay at the traced workers is checked against the trace: the
notes say both.
"""

from __future__ import annotations

import logging

_log = logging.getLogger("lotus.model")


def think_s(model) -> float:
    """Seconds a worker spends between two reads: a sample's preparation less its storage time."""
    m = model.measured
    total = float(m.items_ns.sum() + m.collate_ns.sum() + m.other_ns.sum())
    io = float(m.io_ns.sum()) if m.io_ns is not None else 0.0
    return max(total - io, 0.0) / max(float(m.n.sum()), 1.0) / 1e9


def scale_by_replay(model, files: list[str], workers, *, seconds: float = 1.0) -> list[str]:
    """Set ``model.io_scale`` from replays of ``files`` at the traced workers and at each of ``workers``
    (module doc); the notes to show. Nothing (and no note) when the traced run read nothing from storage."""
    from lotus.profile.diskprobe import replay

    t = model.traced
    if not t.disk_bytes_per_sample or model.measured is None or model.measured.io_ns is None or not files:
        return []
    base_w = max(t.num_workers, 1)
    # the traced runs' own worker counts too: each batch's storage time is scaled from its run's
    counts = sorted({base_w, *(max(r.num_workers, 1) for r in model.runs), *(max(int(w), 1) for w in workers)})
    pause = think_s(model)
    rates = {w: replay(files, w, think_s=pause, seconds=seconds, seed=w) for w in counts}
    if not all(r.read_ms for r in rates.values()):
        failed = sum(r.failed for r in rates.values())
        return [f"storage replay: the dataset's files could not be read at every count ({failed} failed): the "
                "traced storage time is kept at every worker count"]
    model.io_scale = {w: r.read_ms for w, r in rates.items()}
    m = model.measured
    per_sample_ms = float(m.io_ns.sum()) / max(float(m.n.sum()), 1.0) / 1e6
    said = ", ".join(f"{w} reader{'s' if w > 1 else ''} {r.read_ms:.3g} ms ({(r.bytes_per_s or 0) / 1e6:,.0f} MB/s)"
                     for w, r in rates.items() if r.read_ms)
    return [f"storage: the traced run's workers read {t.disk_bytes_per_sample / 1e3:,.0f} kB a sample from storage "
            f"and waited {per_sample_ms:.3g} ms a sample for it ({100 * (t.io_wait_share or 0):.0f}% of a fetch); "
            f"its files read whole, {pause * 1e3:.2g} ms apart, took a file: {said}; predictions scale the "
            "storage time by these against the traced workers'"]


__all__ = ["scale_by_replay", "think_s"]
