"""Verdict: classification, loop time, worker utilisation, slowest op and suggestions."""

from __future__ import annotations

import pytest

from lotus.analysis import classify, loop_spans, verdict, worker_utilisation
from lotus.analysis.runs import load_config


@pytest.mark.parametrize(("share", "cls"), [(None, "unknown"), (0.0, "fine"), (0.049, "fine"),
                                            (0.05, "input-bound"), (0.2, "input-bound"),
                                            (0.21, "severely input-bound"), (float("nan"), "unknown")])
def test_classify(share, cls):
    assert classify(share) == cls


def test_loop_span_and_wait_share(synth_native):
    cfg = load_config(synth_native)
    spans = loop_spans(cfg.batches)
    b = cfg.batches
    assert spans.loc[0, "span_ns"] == int(b["consumed_ns"].max()) - int(b["wait_start_ns"].min())
    assert spans.loc[0, "wait_ns"] == int(b["wait_dur_ns"].sum())
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["wait_share"] == pytest.approx(spans.loc[0, "wait_ns"] / spans.loc[0, "span_ns"])
    assert v["class"] == classify(v["wait_share"])


def test_worker_utilisation(synth_native):
    cfg = load_config(synth_native)
    u = worker_utilisation(cfg.batches)
    assert u["worker_id"].tolist() == [0, 1]
    assert ((u["busy_share"] > 0) & (u["busy_share"] <= 1)).all()
    assert u["busy_ns"].sum() == pytest.approx(float(cfg.batches["prep_dur_ns"].sum()))


def test_saturated_workers_suggest_more_workers(tmp_path):
    from lotus.trace.synthetic import PipelineSpec, write_native

    write_native(tmp_path, PipelineSpec(n_batches=40, batch_size=16, n_workers=2, step_ms=5, seed=5))
    cfg = load_config(tmp_path)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["class"] == "severely input-bound"
    assert v["workers"]["mean_busy_share"] > 0.9
    ids = [s["id"] for s in v["suggestions"]]
    assert ids[0] == "more_workers"
    assert "num_workers=" in v["suggestions"][0]["text"]
    assert "cheaper_op" in ids
    assert v["slowest_op"]["name"] == "load"


def test_more_workers_than_cpus_is_not_suggested(tmp_path):
    from lotus.trace.synthetic import PipelineSpec, write_native

    write_native(tmp_path, PipelineSpec(n_batches=40, batch_size=16, n_workers=2, step_ms=5, seed=5))
    cfg = load_config(tmp_path)
    loaders = {k: {**d, "cpus_available": 3} for k, d in cfg.loaders.items()}
    v = verdict(cfg.events, cfg.batches, loaders=loaders)
    first = v["suggestions"][0]
    assert first["id"] == "more_workers" and "more than the 3 CPUs" in first["text"]
    assert "num_workers=2 is the most" in first["text"]


def test_fine_pipeline(tmp_path):
    from lotus.trace.synthetic import PipelineSpec, write_native

    write_native(tmp_path, PipelineSpec(n_batches=30, batch_size=2, n_workers=4, step_ms=60, seed=6))
    cfg = load_config(tmp_path)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["class"] == "fine"
    assert v["suggestions"][0]["id"] == "fine"
    assert any(s["id"] == "fewer_workers" for s in v["suggestions"])


def test_stragglers_suggest_in_order_false(straggler_run):
    cfg = load_config(straggler_run)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["settings"]["in_order"] is True
    assert "in_order" in [s["id"] for s in v["suggestions"]]


def test_restarting_workers_suggest_persistent_workers(synth_epochs):
    cfg = load_config(synth_epochs)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["class"] != "fine"
    assert "persistent_workers" in [s["id"] for s in v["suggestions"]]


def test_unknown_for_old_logs(reference_dir):
    cfg = load_config(reference_dir / "traces" / "b256_gpu2")
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["class"] == "unknown" and v["wait_share"] is None
    assert v["suggestions"][0]["id"] == "trace_wait"
    assert v["workers"]["count"] == 2
    assert v["slowest_op"]["name"] == "load"


def test_ddp_merges_ranks_and_breaks_down(ddp_run):
    cfg = load_config(ddp_run)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert set(v["per_rank"]) == {0, 1}
    total_wait = sum(r["wait_s"] for r in v["per_rank"].values())
    total_loop = sum(r["loop_s"] for r in v["per_rank"].values())
    assert v["wait_share"] == pytest.approx(total_wait / total_loop)
    assert set(v["workers"]["per_worker"]) == {"r0/w0", "r0/w1", "r1/w0", "r1/w1"}


def test_in_process_loading_suggests_workers(tmp_path):
    import time

    import torch

    from lotus.dataloader import DataLoader

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.zeros(2)

    for _ in DataLoader(Slow(), batch_size=4, num_workers=0, trace_dir=tmp_path):
        time.sleep(0.001)
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    cfg = load_config(tmp_path)
    v = verdict(cfg.events, cfg.batches, loaders=cfg.loaders)
    assert v["settings"]["num_workers"] == 0 and v["class"] == "severely input-bound"
    assert list(v["workers"]["per_worker"]) == ["r0/main"]
    first = v["suggestions"][0]
    assert first["id"] == "more_workers" and "num_workers=0" in first["text"]
    assert "prefetch" not in [s["id"] for s in v["suggestions"]]


def test_startup_dominated_run_is_fine_in_steady_state(tmp_path):
    """A short run whose only real wait is the first batch (workers starting): say so, do not ask for workers."""
    from lotus.query import batches_from_events
    from lotus.trace import load_events
    from lotus.trace import schema as S
    from lotus.trace.writer import TraceWriter

    w = TraceWriter(tmp_path, "main")
    wk = TraceWriter(tmp_path, "worker", worker_id=0)
    t = 0
    ms = 1_000_000
    for i in range(20):
        wait = 800 * ms if i == 0 else ms // 5
        for rec in ((wk, S.EV_FETCH, t - 50 * ms, 40 * ms, 0), (w, S.EV_WAIT, t, wait, 0),
                    (w, S.EV_CONSUMED, t + wait, 0, 0)):
            rec[0].buf += rec[0].pack(rec[1], 0, 0, rec[2], rec[3], i, -1, rec[4])
        t += wait + 100 * ms
    w.close()
    wk.close()
    ev = load_events(tmp_path)
    v = verdict(ev, batches_from_events(ev))
    assert v["class"] == "severely input-bound"
    assert v["steady_class"] == "fine" and v["steady_wait_share"] < 0.01
    assert v["startup_wait_s"] == pytest.approx(0.8)
    ids = [s["id"] for s in v["suggestions"]]
    assert ids[0] == "startup" and "more_workers" not in ids and "prefetch" not in ids
