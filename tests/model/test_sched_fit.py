"""The fit with the scheduler's view (trace format 4): measured CPU fraction, main process, capacity or other work;
and a batch's items capped at its fetch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lotus.model.params import RunSummary
from lotus.model.sched import sched_cpu as _sched_cpu


def _summary(**kw) -> RunSummary:
    base = dict(name="r", num_workers=2, cpus=2.0, batch_size=4, prefetch_factor=2, ranks=1, batches=100,
                cache_state="warm", samples_per_s=100.0, wait_share=0.5, steady_wait_share=0.5, busy_workers=2.0,
                sample_ms=1.0)
    base.update(kw)
    return RunSummary(**base)


def test_capacity_makes_processor_sharing_give_the_run_queue_delay_met():
    # 2 busy workers on 2 CPUs, waiting on the run queue as long as they ran (ps 2), the main process 0.5 CPUs
    s = _summary(sched_prep_ns=20e9, sched_runq_ns=10e9, sched_cpu_ns=10e9, main_cpu_cores=0.5)
    cpu, phi, notes = _sched_cpu([SimpleNamespace(summary=s)], 1.0, None)
    assert phi == pytest.approx(1.0) and cpu.main_measured and cpu.main_cpu_cores == 0.5
    assert cpu.capacity == pytest.approx((2 + 0.5) / (2 * 2))
    assert cpu.stretch(2, 2) == pytest.approx(2.0)  # the run's own stretch, as the scheduler saw it
    assert cpu.stretch(1, 2) == pytest.approx(1.5 / (0.625 * 2))  # one worker: less sharing
    assert "waited for a CPU 50%" in notes[0] and "0.50 CPUs" in notes[0]


def test_cpu_fraction_is_cpu_time_over_the_uncontended_time():
    # 10 s of fetches: 1 s on the run queue, 4.5 s on a CPU, the rest blocked (I/O, sleep): fraction 0.5
    s = _summary(sched_prep_ns=10e9, sched_runq_ns=1e9, sched_cpu_ns=4.5e9, main_cpu_cores=0.2, busy_workers=2.0)
    cpu, phi, _ = _sched_cpu([SimpleNamespace(summary=s)], 1.0, None)
    assert phi == pytest.approx(0.5)
    ps = 1 + 1 / 4.5
    # the job's load (0.5 * 2 + 0.2 = 1.2 CPUs) leaves CPUs idle: the delay met is other work's, a load of its own
    assert cpu.capacity == 1.0 and cpu.other_cpus == pytest.approx(2 * ps - 1.2)
    assert cpu.stretch(2, 2) == pytest.approx(0.5 * ps + 0.5)  # the run's own stretch of its fetches
    # three workers: the other work stays: (1.5 + 0.2 + other) / 2 CPUs
    assert cpu.stretch(3, 2) == pytest.approx(0.5 * (1.7 + 2 * ps - 1.2) / 2 + 0.5)


def test_other_work_stays_where_a_capacity_would_scale_with_the_job():
    # an I/O-bound job (CPU fraction 0.3, 2 busy workers: 0.64 CPUs with its main process) on 2 CPUs shared with
    # a CPU-bound tenant: its wake-ups waited on the run queue 0.9 ns a ns on a CPU
    s = _summary(sched_prep_ns=10e9, sched_runq_ns=2.7e9, sched_cpu_ns=3e9, main_cpu_cores=0.04,
                 busy_workers=2.0)
    cpu, phi, notes = _sched_cpu([SimpleNamespace(summary=s)], 1.0, None)
    ps = 1 + 2.7 / 3
    assert phi == pytest.approx(3 / 7.3) and cpu.other_cpus == pytest.approx(2 * ps - (phi * 2 + 0.04))
    assert "other work runnable on the CPUs" in notes[0]
    # twice the workers: the CPU part stretches by (4 phi + main + other) / 2, not by the job's load doubled
    assert cpu.stretch(4, 2) == pytest.approx(phi * (4 * phi + 0.04 + cpu.other_cpus) / 2 + 1 - phi)


def test_no_shortage_met_keeps_capacity_one_and_a_given_fraction_wins():
    s = _summary(sched_prep_ns=10e9, sched_runq_ns=0.05e9, sched_cpu_ns=9.9e9, main_cpu_cores=0.1, busy_workers=1.0)
    cpu, phi, notes = _sched_cpu([SimpleNamespace(summary=s)], 1.0, 0.7)
    assert cpu.capacity == 1.0 and cpu.other_cpus == 0.0 and phi is None and cpu.cpu_fraction == 0.7
    assert "no CPU shortage met" in notes[0]


def test_runs_without_it_keep_the_assumptions():
    s = _summary()  # format <= 3: no scheduler's view
    cpu, phi, notes = _sched_cpu([SimpleNamespace(summary=s)], 1.0, None)
    assert (cpu.capacity, cpu.main_measured, phi, notes) == (1.0, False, None, [])
    assert cpu.stretch(2, 2, main_busy=0.5) == pytest.approx(1.25)  # main 1 core while not waiting


def test_items_never_exceed_the_fetch_less_collation():
    from lotus.model.observation import _items

    prep = np.array([10e6, 10e6, 10e6])
    collate = np.array([2e6, 2e6, 2e6])
    # detail sums for batch 0 only, past its fetch (its records' own cost); batches 1-2 estimated from it
    d = SimpleNamespace(sample_sum=None, sample_count=None, load_sum=np.array([12e6, 0.0, 0.0]),
                        load_count=np.array([4, 0, 0]), transform_sum=None)

    class Src:
        def has(self, name):
            return name == "detail"

        def cols(self, names):
            import pandas as pd

            return pd.DataFrame({"detail": [True, False, False], "collate_dur_ns": collate}, columns=names)

    n = np.array([4.0, 4.0, 4.0])
    items, _, (col, other) = _items(d, Src(), n, prep, np.ones(3, bool), [])
    assert np.all(items + col + other == pytest.approx(prep))
    assert np.all(items == pytest.approx(8e6))


@pytest.mark.timeout(180)
def test_a_real_traced_run_is_fitted_with_it(tmp_path):
    from pathlib import Path

    from lotus.dataloader import DataLoader
    from lotus.dataloader.schedstat import PATH
    from lotus.model.fitting import fit
    from tests.dataloader.datasets import SpinDS

    if not Path(PATH).exists():
        pytest.skip("no /proc/thread-self/schedstat here")
    loader = DataLoader(SpinDS(256, ms=1.0), batch_size=8, num_workers=2, trace_dir=tmp_path,
                        persistent_workers=True)
    for _ in range(2):
        for _ in loader:
            pass
    del loader
    m = fit(tmp_path)
    assert m.main_cpu_measured and 0 < m.main_cpu_cores < 2
    assert 0.2 <= m.cpu_capacity <= 2.0 and 0.8 <= m.cpu_fraction <= 1.0  # the items spin on a CPU
    assert any(n.startswith("the scheduler's view") for n in m.notes)
    assert m.predict(2, 2).samples_per_s > 0
    plain = fit(tmp_path, sched=False)
    assert not plain.main_cpu_measured and plain.cpu_capacity == 1.0
