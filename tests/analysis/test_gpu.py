"""GPU idle analysis: interval maths, the report on a synthetic CUDA trace, Kineto cross-check, CLI, probe."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from lotus.analysis.gpu import KinetoGPU, gpu_batches, gpu_report, idle_within, kineto_gpu_busy, merge_intervals
from lotus.cli import cli
from lotus.query import batches_from_events
from lotus.trace import load_events
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter

MS = 1_000_000


def _rec(w, nid, start, dur=0, batch=-1, arg=0, epoch=0):
    w.buf += w.pack(nid, 0, epoch, start, dur, batch, -1, arg)


def write_gpu_run(d, ranks=(0,), n=20, wait_ms=(5.0, 20.0), step_ms=30.0, slow_rank=None):
    """A traced run with CUDA events and telemetry: batch i waits wait_ms[i % 2] (GPU idle that long),
    then the GPU computes step_ms. Returns {rank: Kineto-like doc} whose kernels fill each step."""
    docs = {}
    for rank in ranks:
        w = TraceWriter(d, "main", rank=rank, world_size=len(ranks))
        ww = TraceWriter(d, "worker", rank=rank, world_size=len(ranks), worker_id=0)
        mono0 = 10_000 * MS
        t = mono0
        kernels = []
        energy = 1_000_000
        extra = 3.0 if rank == slow_rank else 0.0
        for i in range(n):
            wait = int((wait_ms[i % len(wait_ms)] + extra) * MS)
            _rec(ww, S.EV_FETCH, t - 40 * MS, 35 * MS, batch=i)
            _rec(ww, S.EV_COLLATE, t - 10 * MS, 2 * MS, batch=i, arg=32)
            _rec(w, S.EV_WAIT, t, wait, batch=i)
            _rec(w, S.EV_CONSUMED, t + wait, 0, batch=i)
            _rec(w, S.EV_GPU_WAIT, t, wait, batch=i, arg=1)
            step = int(step_ms * MS)
            _rec(w, S.EV_STEP, t + wait, step, batch=i)
            _rec(w, S.EV_GPU_STEP, t + wait, step, batch=i, arg=1)
            kernels.append((t + wait + MS // 10, t + wait + step))
            for k in range(0, int((wait + step) / (10 * MS))):
                ts = t + k * 10 * MS
                _rec(w, S.EV_GPU_UTIL, ts, arg=90 if ts > t + wait else 0)
                _rec(w, S.EV_GPU_POWER, ts, arg=300_000)
                energy += 3000  # 3 J per 10 ms = 300 W
                _rec(w, S.EV_GPU_ENERGY, ts, arg=energy)
            t += wait + step
        w.close()
        ww.close()
        from lotus.trace.native import read_trace_file

        h = read_trace_file(w.path).header
        shift = h["anchor_wall_ns"] - h["anchor_mono_ns"]
        base = (mono0 + shift) // 10**9 * 10**9
        docs[rank] = {"baseTimeNanoseconds": base, "distributedInfo": {"rank": rank}, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": (a + shift - base) / 1000,
             "dur": (b - a) / 1000} for a, b in kernels]}
    return docs


def test_merge_and_idle_within_match_brute_force():
    rng = np.random.default_rng(0)
    s = np.sort(rng.integers(0, 10_000, 60))
    e = s + rng.integers(1, 400, 60)
    ms_, me = merge_intervals(s, e)
    busy = np.zeros(11_000, bool)
    for a, b in zip(s, e, strict=True):
        busy[a:b] = True
    merged = np.zeros(11_000, bool)
    for a, b in zip(ms_, me, strict=True):
        merged[a:b] = True
    assert (busy == merged).all() and (ms_[1:] > me[:-1]).all()
    k = KinetoGPU(0, ms_, me, 60)
    lo = rng.integers(0, 10_000, 50)
    hi = lo + rng.integers(0, 800, 50)
    got = idle_within(k, lo, hi)
    want = np.array([(~busy[a:b]).sum() for a, b in zip(lo, hi, strict=True)])
    assert (got == want).all()


def test_report_on_synthetic_cuda_trace(tmp_path):
    docs = write_gpu_run(tmp_path)
    events = load_events(tmp_path)
    batches = batches_from_events(events)
    kin = {r: kineto_gpu_busy(doc) for r, doc in docs.items()}
    rep = gpu_report(events, batches, kin)
    r = rep["ranks"][0]
    assert rep["cuda_events"] and r["batches"] == 20 and r["samples"] == 20 * 32
    assert r["gpu_idle_waiting_for_data_ms"]["sum"] == pytest.approx(10 * 5 + 10 * 20)
    assert r["data_idle_share_of_gpu_time"] == pytest.approx(250 / (250 + 20 * 30))
    tel = r["telemetry"]
    assert tel["power_w_mean"] == pytest.approx(300)
    assert 0 < tel["energy_per_sample_j"] < 1.0
    k = r["kineto"]
    assert k["batches_compared"] == 19  # the first wait precedes the first kernel: outside the window
    assert k["agreement_mean_pct_of_step"] < 1.0  # both measures agree (0.1 ms launch gap aside)
    per = gpu_batches(batches, kin)
    assert per["kineto_idle_ms"].notna().sum() == 19


def test_straggler_rank_and_cli(tmp_path):
    docs = write_gpu_run(tmp_path, ranks=(0, 1), slow_rank=1)
    for rank, doc in docs.items():
        (tmp_path / f"kineto-r{rank}.pt.trace.json").write_text(json.dumps(doc))
    rep = gpu_report(load_events(tmp_path), batches_from_events(load_events(tmp_path)))
    assert rep["straggler"]["rank"] == 1
    result = CliRunner().invoke(cli, ["analyze", "gpu", "--data-dir", str(tmp_path), "--fig-dir",
                                      str(tmp_path / "figs")])
    assert result.exit_code == 0, result.output
    assert "data-loading share of GPU time" in result.output and "straggler: rank 1" in result.output
    assert "CUDA events vs profiler" in result.output
    assert (tmp_path / "figs" / f"gpu_batches_{tmp_path.name}.png").exists()
    js = CliRunner().invoke(cli, ["analyze", "gpu", "--data-dir", str(tmp_path), "--json"])
    doc = json.loads(js.stdout)
    assert doc["configs"][tmp_path.name]["ranks"]["1"]["kineto"]["batches_compared"] == 19


def test_cpu_trace_says_host_only(tmp_path, reference_dir):
    result = CliRunner().invoke(cli, ["analyze", "gpu", "--data-dir", str(reference_dir / "traces" / "b128_gpu4")])
    assert result.exit_code == 0
    assert "no CUDA events" in result.output


class _FakeEvent:
    clock = 0

    def __init__(self, enable_timing=True):
        self.t = None
        self.done = False

    def record(self, stream=None):
        _FakeEvent.clock += 1
        self.t = _FakeEvent.clock

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True

    def elapsed_time(self, other):
        return float(other.t - self.t)  # ms


class _FakeCuda:
    Event = _FakeEvent

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def is_initialized():
        return True

    @staticmethod
    def current_stream():
        return "stream"


class _Sink:
    on = True
    epoch = 0

    def __init__(self):
        self.rows = []
        self.epochs = []  # the epoch each row was recorded in

    def record(self, *row):
        self.rows.append(row)
        self.epochs.append(self.epoch)

    def record_in(self, epoch, *row):
        self.rows.append(row)
        self.epochs.append(epoch)

    def on_cuda_ready(self):
        pass


def _batches(probe, ids) -> None:
    """The loop asks for and gets each batch of ``ids`` (what the iterators call around next())."""
    for b in ids:
        probe.request()
        probe.got(b)


def _polling(probe):
    """The probe as on a torch without the init queue (compat.cuda_on_init False): it polls."""
    probe._polling = probe.wanted = True
    return probe


def test_cuda_probe_never_blocks_and_resolves_in_order():
    from lotus.dataloader.gpu import CudaProbe

    sink = _Sink()
    probe = _polling(CudaProbe(sink))
    probe._cuda = _FakeCuda
    _batches(probe, range(3))
    assert sink.rows == []  # nothing completed on the "GPU": nothing resolved, nothing waited for
    for ev in [x for rec in probe._pending for x in rec[2:4]]:
        ev.done = True
    probe.request()  # resolves what completed, in order
    kinds = [(r[0], r[3]) for r in sink.rows]
    assert kinds == [(S.EV_GPU_WAIT, 0), (S.EV_GPU_STEP, 0), (S.EV_GPU_WAIT, 1), (S.EV_GPU_STEP, 1),
                     (S.EV_GPU_WAIT, 2)]
    assert all(r[2] == 1_000_000 for r in sink.rows)  # 1 "ms" between consecutive events
    probe.finish()
    probe.close()  # blocks only here, at exit
    assert (S.EV_GPU_STEP, 2) in [(r[0], r[3]) for r in sink.rows]


def test_events_resolved_after_the_next_epoch_began_keep_their_epoch():
    """CUDA events resolve lazily: an epoch's last steps often complete after the next epoch started. They
    are recorded in the epoch of their batch (recorded in the new one, they were a duplicate of its batch of
    the same number: `lotus analyze` warned and dropped one; seen on an H200 DDP run)."""
    from lotus.dataloader.gpu import CudaProbe

    sink = _Sink()
    probe = _polling(CudaProbe(sink))
    probe._cuda = _FakeCuda
    _batches(probe, range(3))
    probe.request()  # the loop asks once more: the epoch ends (StopIteration)
    probe.finish()  # nothing completed yet on the "GPU"
    sink.epoch = 1  # the next epoch begins (LoaderTrace.epoch += 1 in DataLoader.__iter__)
    _batches(probe, range(2))
    for ev in [x for rec in probe._pending for x in rec[2:4]]:
        ev.done = True
    probe.request()
    got = sorted(zip(sink.epochs, [(r[0], r[3]) for r in sink.rows], strict=True))
    assert got == sorted([(0, (S.EV_GPU_WAIT, b)) for b in range(3)] + [(0, (S.EV_GPU_STEP, b)) for b in range(3)]
                         + [(1, (S.EV_GPU_WAIT, b)) for b in range(2)] + [(1, (S.EV_GPU_STEP, 0))])
    assert len(set(got)) == len(got)  # no (epoch, kind, batch) twice


def test_probe_makes_the_stream_object_again_only_when_the_current_stream_changes():
    from lotus.dataloader.gpu import CudaProbe

    made = []

    class _Cuda(_FakeCuda):
        @staticmethod
        def current_stream():
            made.append(1)
            return f"stream{len(made)}"

    probe = CudaProbe(_Sink())
    probe._cuda = _Cuda
    key = ["s0"]
    probe._stream_key = lambda: key[0]
    assert [probe._stream() for _ in range(3)] == ["stream1"] * 3
    key[0] = "s1"  # the loop switched streams (torch.cuda.stream(...)) or devices
    assert [probe._stream() for _ in range(2)] == ["stream2"] * 2
    probe._stream_key = lambda: 1 / 0  # the private call failed: the public one from now on
    assert probe._stream() == "stream3" and probe._stream_key is None and probe._stream() == "stream4"


def test_probe_waiting_for_cuda_asks_only_whether_it_is_initialised():
    """Before CUDA is initialised the probe checks every batch; torch.cuda.is_available() asks the
    driver each time (~6 us a batch on the H100 host), so only is_initialized() is asked."""
    from lotus.dataloader.gpu import CudaProbe

    class _NotYet(_FakeCuda):
        initialized = False

        @staticmethod
        def is_available():
            raise AssertionError("is_available() asked per batch")

        @classmethod
        def is_initialized(cls):
            return cls.initialized

    sink = _Sink()
    probe = _polling(CudaProbe(sink))
    probe._cuda = _NotYet
    _batches(probe, range(3))
    assert not probe.active and not probe._pending  # no events before CUDA is initialised
    _NotYet.initialized = True
    _batches(probe, [3])
    assert probe.active and [p[:2] for p in probe._pending] == [(S.EV_GPU_WAIT, 3)]


def test_probe_waits_for_torch_to_say_cuda_is_initialised(monkeypatch):
    """Where torch runs queued calls at its CUDA init (compat.cuda_on_init), nothing is asked per batch
    before it: the iterators skip request()/got() while ``wanted`` is False; torch's call turns it on."""
    from lotus.dataloader import _torch_compat as compat
    from lotus.dataloader.gpu import CudaProbe

    queued = []
    monkeypatch.setattr(compat, "cuda_on_init", lambda fn: queued.append(fn) or True)

    class _Never(_FakeCuda):
        @staticmethod
        def is_initialized():
            raise AssertionError("is_initialized() asked per batch")

    sink = _Sink()
    probe = CudaProbe(sink)
    probe._cuda = _Never
    assert len(queued) == 1 and not probe.wanted and not probe.active
    _batches(probe, [0])
    assert not probe._pending
    probe._cuda = _FakeCuda
    queued[0]()  # torch initialises CUDA
    assert probe.wanted and probe.active
    _batches(probe, [1])
    assert [p[:2] for p in probe._pending] == [(S.EV_GPU_WAIT, 1)]
    del probe
    queued[0]()  # a probe already freed: nothing happens, nothing raises


def test_traced_loop_skips_the_probe_until_cuda_starts(tmp_path, monkeypatch):
    """A traced loop on a CUDA machine that has not initialised CUDA calls nothing of the probe per batch."""
    import torch

    from lotus.dataloader import DataLoader
    from lotus.dataloader import _torch_compat as compat
    from lotus.dataloader import gpu as gpu_mod
    from tests.dataloader.datasets import MapDS

    queued = []
    monkeypatch.setattr(compat, "cuda_on_init", lambda fn: queued.append(fn) or True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    calls = []
    monkeypatch.setattr(gpu_mod.CudaProbe, "request", lambda self: calls.append("request"))
    monkeypatch.setattr(gpu_mod.CudaProbe, "got", lambda self, b: calls.append("got"))
    for workers in (0, 2):
        loader = DataLoader(MapDS(n=8), batch_size=2, num_workers=workers, trace_dir=tmp_path / str(workers))
        assert len(list(loader)) == 4 and calls == []
        queued[-1]()  # CUDA starts: from the next batch on, the probe is asked
        assert len(list(loader)) == 4 and calls == ["request", "got"] * 4 + ["request"]
        calls.clear()


def test_probe_is_freed_without_the_cycle_collector(tmp_path, monkeypatch):
    """No reference cycle may hold CUDA events: a forked worker would destroy them while collecting
    garbage inherited from its parent (seen on a GPU box: cudaErrorInitializationError, worker abort)."""
    import gc
    import weakref

    import torch

    from lotus.dataloader import DataLoader
    from lotus.dataloader import gpu as gpu_mod
    from lotus.trace.writer import close_main_writers
    from tests.dataloader.datasets import MapDS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gc.collect()
    gc.disable()
    try:
        loader = DataLoader(MapDS(n=4), batch_size=2, trace_dir=tmp_path)
        probe = loader._lotus.cuda_probe()
        assert isinstance(probe, gpu_mod.CudaProbe)
        steps = loader._lotus.user_steps()
        refs = [weakref.ref(probe), weakref.ref(steps), weakref.ref(loader._lotus)]
        gpu_mod.set_active(loader._lotus)
        del loader, probe, steps
        close_main_writers()
        assert [r() for r in refs] == [None, None, None]  # freed by reference counting alone
    finally:
        gc.enable()


def test_report_of_the_columns_it_reads_is_the_report(tmp_path):
    """`lotus analyze gpu` asks a scanned run for COLUMNS only (no whole batches frame): the same report."""
    from lotus.analysis.gpu import COLUMNS, REPORT_COLUMNS
    from lotus.analysis.runs import load_config

    docs = write_gpu_run(tmp_path, ranks=(0, 1), slow_rank=1)
    kin = {r: kineto_gpu_busy(doc) for r, doc in docs.items()}
    scanned = load_config(tmp_path, engine="scan")
    whole = load_config(tmp_path)
    lean = scanned.batches_of(COLUMNS)
    assert list(lean.columns) == COLUMNS
    assert gpu_report(scanned.events, lean, kin) == gpu_report(whole.events, whole.batches, kin)
    assert gpu_batches(lean, kin).equals(gpu_batches(whole.batches, kin))
    leaner = scanned.batches_of(REPORT_COLUMNS)  # the text report's: no ids
    assert gpu_report(scanned.events, leaner, kin) == gpu_report(whole.events, whole.batches, kin)
