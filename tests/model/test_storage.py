"""A traced run's storage time at other numbers of workers (lotus.model.storage): the engine scales each
batch's storage time by the replay's factor; scale_by_replay sets it from reads of the dataset's files."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from lotus.profile.diskprobe import ReadRate


def _io_model(truth_model, share: float = 0.8):
    """The synthetic truth (2 workers on 4 CPUs, input-bound) with ``share`` of each batch's item time spent
    waiting for storage, as a format-5 trace says it."""
    m = copy.deepcopy(truth_model)
    m.measured.io_ns = m.measured.items_ns * share
    m.measured.io_workers = np.full(len(m.measured.n), 2.0)  # the traced run's 2 workers
    prep = m.measured.items_ns + m.measured.collate_ns + m.measured.other_ns
    m.traced = replace(m.traced, disk_bytes_per_sample=262144.0,
                       io_wait_share=float(m.measured.io_ns.sum() / prep.sum()))
    return m


def test_without_a_replay_the_traced_storage_time_is_kept(truth_model):
    m = _io_model(truth_model)
    t = m.traced
    for w in (1, 2, 4):
        assert m.predict(w, t.cpus).samples_per_s == pytest.approx(truth_model.predict(w, t.cpus).samples_per_s)


def test_a_saturated_storage_holds_the_rate_where_the_workers_would_double_it(truth_model):
    m = _io_model(truth_model)
    t = m.traced
    free = m.predict(4, t.cpus).samples_per_s
    m.io_scale = {1: 0.5, 2: 1.0, 4: 2.0}  # a file takes as long as the readers sharing the device: saturated
    at = {w: m.predict(w, t.cpus) for w in (1, 2, 4)}
    assert at[2].samples_per_s == pytest.approx(truth_model.predict(2, t.cpus).samples_per_s)  # traced: as is
    assert free > 1.3 * at[2].samples_per_s  # without the replay, twice the workers: up to the step's pace
    assert at[4].samples_per_s < 1.2 * at[2].samples_per_s and at[4].bottleneck == "I/O (cold reads)"
    assert at[1].samples_per_s > 0.6 * at[2].samples_per_s  # one reader has the device to itself
    assert m.io_factor(8) == 2.0 and m.io_factor(3) == pytest.approx(1.5)  # flat beyond, linear between


def test_scale_by_replay_sets_the_factors_against_the_traced_workers(truth_model, monkeypatch):
    from lotus.model import storage

    m = _io_model(truth_model)
    seen = []

    def fake(files, readers, *, think_s, seconds, seed):
        seen.append((readers, think_s))
        return ReadRate(readers=readers, files=100, bytes=100 * 262144, seconds=1.0, read_ms=2.5 * readers)

    monkeypatch.setattr("lotus.profile.diskprobe.replay", fake)
    notes = storage.scale_by_replay(m, ["f"] * 10, [1, 4], seconds=1.0)
    assert [r for r, _ in seen] == [1, 2, 4]  # the traced 2 workers, and each asked count
    think = storage.think_s(m)
    assert all(t == pytest.approx(think) for _, t in seen) and 0 < think < 0.01
    assert m.io_scale == {1: 2.5, 2: 5.0, 4: 10.0}  # the read times: a batch at 2 workers x 2 at 4
    assert "storage:" in notes[0] and "4 readers 10 ms" in notes[0]


def test_nothing_is_replayed_for_a_run_that_read_nothing_from_storage(truth_model, monkeypatch):
    from lotus.model import storage

    monkeypatch.setattr("lotus.profile.diskprobe.replay", lambda *a, **k: pytest.fail("replayed"))
    m = copy.deepcopy(truth_model)
    assert storage.scale_by_replay(m, ["f"], [1, 4]) == [] and m.io_scale == {}


def test_a_real_replay_of_files(truth_model, tmp_path):
    from lotus.model import storage

    files = []
    for i in range(16):
        files.append(tmp_path / f"{i}.bin")
        files[-1].write_bytes(np.random.default_rng(i).bytes(64 << 10))
    m = _io_model(truth_model)
    notes = storage.scale_by_replay(m, [str(f) for f in files], [4], seconds=0.5)
    assert set(m.io_scale) == {2, 4} and m.io_scale[2] > 0 and m.io_scale[4] > 0
    assert "2 readers" in notes[0] and "4 readers" in notes[0]


def test_batches_of_runs_at_other_worker_counts_scale_from_their_own(truth_model):
    """A model fitted on runs at 2 and 4 workers (sensitivity's probes): each batch's storage time is scaled
    from its own run's readers, so a saturated storage gives the same prediction whichever run a batch came
    from."""
    one = _io_model(truth_model)
    one.io_scale = {1: 0.5, 2: 1.0, 4: 2.0}
    mixed = _io_model(truth_model)
    n = len(mixed.measured.n)
    mixed.measured.io_workers = np.where(np.arange(n) % 2 == 0, 2.0, 4.0)
    extra = np.where(mixed.measured.io_workers == 4.0, 1.0, 0.0) * mixed.measured.io_ns
    mixed.measured.io_ns = mixed.measured.io_ns + extra  # the 4-worker run's fetches waited twice as long
    mixed.measured.items_ns = mixed.measured.items_ns + extra
    mixed.io_scale = dict(one.io_scale)
    t = one.traced
    for w in (1, 2, 4):
        assert mixed.predict(w, t.cpus).samples_per_s == pytest.approx(one.predict(w, t.cpus).samples_per_s)


def test_every_fit_of_sensitivity_gets_the_replay(truth_run, truth_model, monkeypatch):
    from lotus.profile.probefit import ProbeFit

    s = ProbeFit(None, None, None)
    assert s.replay(["f"], [1, 2]) == []  # no model yet: nothing to replay for
    s.model = _io_model(truth_model)
    monkeypatch.setattr("lotus.profile.diskprobe.replay", lambda files, readers, **k: ReadRate(
        readers=readers, files=10, bytes=10 << 20, seconds=1.0, read_ms=3.0 * readers))
    monkeypatch.setattr(ProbeFit, "refit", lambda self: None)  # no probes to cross-validate here
    notes = s.replay(["f"], [1, 4])
    assert s.io_scale == {1: 3.0, 2: 6.0, 4: 12.0} and "storage:" in notes[0]
    for variant in s.variants.values():  # each structural variant's fit carries it
        assert variant([truth_run]).io_scale == s.io_scale
