"""The worker -> main hand-off as a queue (lotus.model.handoff): the service time from a measured wait, the
wait at other rates, and the engine's fixed point."""

from __future__ import annotations

import pytest

from lotus.model.handoff import MAX_RHO, service_ns, wait_ns


def test_the_service_time_gives_back_the_wait_it_came_from():
    s = service_ns(393e6, 18.75)  # the GPU host's ResNet-18 run at 16 workers
    assert s == pytest.approx(50.1e6, rel=0.01)  # its main process measured 48 ms of CPU a batch
    assert wait_ns(s, 18.75) == pytest.approx(393e6, rel=1e-6)
    assert wait_ns(s, 12.3) == pytest.approx(40.3e6, rel=0.01)  # 8 workers' rate: 29 ms measured


def test_the_wait_grows_with_the_rate_and_stays_finite():
    s = 10e6
    waits = [wait_ns(s, r) for r in (10, 50, 90, 200)]
    assert waits == sorted(waits) and waits[0] < 1e6
    assert waits[-1] == pytest.approx(MAX_RHO / (2 * (1 - MAX_RHO)) * s)  # past saturation: capped


@pytest.mark.parametrize("wait,rate", [(None, 10), (0, 10), (5e6, 0), (5e6, None), (-1, 3)])
def test_nothing_to_tell(wait, rate):
    assert service_ns(wait, rate) is None


def test_the_engine_keeps_the_traced_latency_at_the_traced_rate(truth_model):
    """A latency that matters (a third of a batch's preparation): at the traced setting the fixed point is the
    traced latency; at fewer workers (fewer batches a second) it is shorter. A negligible one: not iterated."""
    import copy

    t = truth_model.traced
    assert not any(n.startswith("worker -> main") for n in truth_model.predict(t.num_workers, t.cpus).notes)
    m = copy.copy(truth_model)
    prep_ms = float((m.measured.items_ns + m.measured.collate_ns + m.measured.other_ns).mean()) / 1e6
    m.arrive_latency_ms = prep_ms / 3
    m.handoff_service_ms = service_ns(m.arrive_latency_ms * 1e6, t.samples_per_s / t.batch_size) / 1e6

    def latency(p) -> float:
        note = next(n for n in p.notes if n.startswith("worker -> main hand-off"))
        return float(note.split()[4].replace(",", ""))

    p = m.predict(t.num_workers, t.cpus)
    assert latency(p) == pytest.approx(m.arrive_latency_ms, rel=0.15)
    assert latency(m.predict(1, t.cpus)) < latency(p)
