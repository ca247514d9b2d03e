"""Epoch restarts in the model (issue 15): a job of short epochs pays, every epoch, the restart gap, fresh
workers' start and the prefetch ramp refilled from empty; the one measure of a long run counts them, so
predictions must too. Truth: the simulator's runs (restart gap 200 ms, worker start 20 ms + 1.5 ms per
worker), measured with lotus's one measure."""

from __future__ import annotations

import pytest

from lotus.model import fit

SHORT = {"n_batches": 10, "epochs": 8}


def _measured(run) -> float:
    from lotus.analysis.throughput import throughput

    return throughput(run.batches, run.loaders)["samples_per_s"]


@pytest.mark.parametrize("workers", [2, 3])
def test_short_epochs_predicted_with_their_restarts(make_run, workers):
    run = make_run(f"short-w{workers}", n_workers=workers, **SHORT)
    model = fit(run)
    assert model.epoch_batches == 10
    assert model.epoch_gap_ms(workers) == pytest.approx(200, rel=0.25)
    assert 10 <= model.epoch_boot_ms <= 40
    p = model.predict(workers, 4)
    truth = _measured(run)
    assert p.samples_per_s == pytest.approx(truth, rel=0.1)
    assert p.within_epoch_samples_per_s > 1.5 * p.samples_per_s  # restarts dominate epochs of 10 batches
    assert any("epochs of 10 batches" in n for n in p.notes)


def test_short_epochs_other_worker_count(make_run):
    model = fit([make_run("short-w2", n_workers=2, **SHORT), make_run("short-w4", n_workers=4, **SHORT)])
    other = make_run("short-w3", n_workers=3, **SHORT)
    assert model.predict(3, 4).samples_per_s == pytest.approx(_measured(other), rel=0.12)


def test_restart_gap_grows_with_the_workers_started(truth_model):
    """torch starts a fresh set of workers one after the other: the gap is base + per worker x workers (on
    the H100 host 15 workers gave 390 ms, 24 workers 610 ms)."""
    from dataclasses import replace

    m = replace(truth_model, epoch_batches=64, epoch_gap0_ms=None, epoch_gap_per_worker_ms=26.0)
    assert m.epoch_gap_ms(15) == pytest.approx(390) and m.epoch_gap_ms(24) == pytest.approx(624)
    assert m.epoch_gap_ms(0) == 0.0
    m = replace(m, epoch_gap0_ms=5.0)
    assert m.epoch_gap_ms(0) == 5.0 and m.epoch_gap_ms(10) == pytest.approx(265)
    assert m.predict(4, 16).samples_per_s > m.predict(24, 16).samples_per_s * 0.5  # finite, both predicted


def test_one_epoch_has_no_restart(truth_model):
    assert truth_model.epoch_batches is None and truth_model.epoch_gap_ms(2) is None
    p = truth_model.predict(2, 4)
    assert p.within_epoch_samples_per_s is None and not any("epochs of" in n for n in p.notes)
