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
    assert model.epoch_gap_ms == pytest.approx(200, rel=0.25)
    assert 10 <= model.epoch_boot_ms <= 40
    p = model.predict(workers, 4)
    truth = _measured(run)
    assert p.samples_per_s == pytest.approx(truth, rel=0.1)
    assert p.within_epoch_samples_per_s > 1.5 * p.samples_per_s  # restarts dominate epochs of 10 batches
    assert any("epochs of 10 batches" in n for n in p.notes)


def test_short_epochs_other_worker_count(make_run):
    model = fit(make_run("short-w2", n_workers=2, **SHORT))
    other = make_run("short-w3", n_workers=3, **SHORT)
    assert model.predict(3, 4).samples_per_s == pytest.approx(_measured(other), rel=0.12)


def test_one_epoch_has_no_restart(truth_model):
    assert truth_model.epoch_batches is None and truth_model.epoch_gap_ms is None
    p = truth_model.predict(2, 4)
    assert p.within_epoch_samples_per_s is None and not any("epochs of" in n for n in p.notes)
