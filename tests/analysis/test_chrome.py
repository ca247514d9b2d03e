"""Chrome/Perfetto trace: structure, exact times, nesting, flows, counters, Kineto merge, streaming."""

from __future__ import annotations

import collections
import gzip
import json

import pytest

from lotus.analysis import write_chrome_trace
from lotus.analysis.chrome import TID_MAIN
from lotus.query.batches import batches_from_events
from lotus.trace import load_events
from lotus.trace import schema as S


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _misnested(doc) -> int:
    tracks = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round(e["dur"] * 1000)))
    bad = 0
    for evs in tracks.values():
        stack = []
        for ts, dur in evs:  # in file order
            while stack and stack[-1][0] + stack[-1][1] <= ts:
                stack.pop()
            if stack and ts + dur > stack[-1][0] + stack[-1][1]:
                bad += 1
            stack.append((ts, dur))
    return bad


def test_structure_and_exact_times(synth_native, tmp_path):
    ev = load_events(synth_native)
    s = write_chrome_trace(ev, tmp_path / "t.json")
    doc = _load(tmp_path / "t.json")
    base = doc["baseTimeNanoseconds"]
    assert base == s.base_ns and base % 1_000_000_000 == 0
    phs = collections.Counter(e["ph"] for e in doc["traceEvents"])
    assert phs["X"] == s.slices and phs["i"] == s.instants and phs["s"] == phs["f"] == 12
    names = {(e["name"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and "name" in e["args"]}
    assert ("process_name", "rank 0 main (pid 1000)") in names
    assert ("thread_name", "main thread") in names and ("thread_name", "worker 1") in names
    # every X event is exact to the ns: ts * 1000 + base == start_ns
    starts = set((ev["start_ns"] - base).tolist())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert all(round(e["ts"] * 1000) in starts for e in xs)
    text = (tmp_path / "t.json").read_text()
    assert '"ts":' in text and ".000," not in text.split('"traceEvents"')[0]
    fetch = next(e for e in xs if e["name"] == "fetch")
    assert set(fetch["args"]) >= {"epoch", "batch", "flags"}
    assert _misnested(doc) == 0


def test_flows_link_fetch_to_consumption(synth_native, tmp_path):
    ev = load_events(synth_native)
    write_chrome_trace(ev, tmp_path / "t.json")
    doc = _load(tmp_path / "t.json")
    b = batches_from_events(ev).set_index("batch_id")
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 12
    base = doc["baseTimeNanoseconds"]
    for i, f in ends.items():
        assert f["bp"] == "e" and f["tid"] == TID_MAIN and f["pid"] == 1000
        s = starts[i]
        assert s["pid"] != 1000 and s["ts"] < f["ts"]
    consumed = {int(v) - base for v in b["consumed_ns"]}
    assert {round(f["ts"] * 1000) for f in ends.values()} == consumed


def test_coarse_leaves_out_samples_and_ops(synth_native, tmp_path):
    ev = load_events(synth_native)
    fine = write_chrome_trace(ev, tmp_path / "fine.json")
    coarse = write_chrome_trace(ev, tmp_path / "coarse.json", coarse=True)
    names = {e.get("name") for e in _load(tmp_path / "coarse.json")["traceEvents"] if e["ph"] == "X"}
    assert "fetch" in names and "collate" in names and "wait" in names
    assert not names & {"sample", "load", "transform", "RandomResizedCrop"}
    assert coarse.slices < fine.slices


def test_chunking_does_not_change_output(synth_native, tmp_path):
    ev = load_events(synth_native)
    write_chrome_trace(ev, tmp_path / "a.json")
    write_chrome_trace(ev, tmp_path / "b.json", chunk_rows=7)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_gpu_telemetry_becomes_counters_and_gz(tmp_path):
    from lotus.trace.writer import TraceWriter

    w = TraceWriter(tmp_path / "run", "main")
    t = 1_000_000_000
    for k in range(5):
        w.buf += w.pack(S.EV_GPU_UTIL, 0, 0, t + k * 1000, 0, -1, -1, 50 + k)
        w.buf += w.pack(S.EV_GPU_POWER, 0, 0, t + k * 1000, 0, -1, -1, 200_000)
    w.buf += w.pack(S.EV_WAIT, 0, 0, t, 5000, 0, -1, 0)
    w.close()
    out = tmp_path / "t.json.gz"
    s = write_chrome_trace(load_events(tmp_path / "run"), out)
    doc = _load(out)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert s.counters == len(counters) == 10
    util = [e["args"]["%"] for e in counters if e["name"] == "gpu_util"]
    assert util == [50, 51, 52, 53, 54]
    assert {e["name"] for e in counters} == {"gpu_util", "gpu_power"}
    assert all(e["args"].get("mW") == 200_000 for e in counters if e["name"] == "gpu_power")


def test_kineto_merge_moves_kineto_to_the_lotus_base(synth_native, tmp_path):
    kbase = 1_699_990_000_500_000_000  # Kineto's base: before lotus's, not a whole second
    kineto = {"schemaVersion": 1, "baseTimeNanoseconds": kbase, "deviceProperties": [],
              "traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1000, "tid": 1000,
                               "ts": 10_000_000_001.5, "dur": 2.0}]}
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    ev = load_events(synth_native)
    s = write_chrome_trace(ev, tmp_path / "m.json", kineto=[tmp_path / "k.json"])
    doc = _load(tmp_path / "m.json")
    base = int(ev["start_ns"].min()) // 10**9 * 10**9
    assert doc["baseTimeNanoseconds"] == base and doc["schemaVersion"] == 1 and "deviceProperties" in doc
    assert s.kineto_events == 1
    mm = next(e for e in doc["traceEvents"] if e.get("name") == "aten::mm")
    # same wall-clock instant on the new base
    assert round(mm["ts"] * 1000) + base == round(10_000_000_001.5 * 1000) + kbase
    lotus_pids = {e["pid"] for e in doc["traceEvents"] if e.get("cat") in ("main", "batch")}
    assert 1000 not in lotus_pids  # renumbered: pid 1000 belongs to the Kineto process
    main_name = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["args"].get("name") == "rank 0 main (pid 1000)"]
    assert main_name and main_name[0]["pid"] != 1000


@pytest.mark.timeout(60)
def test_real_run_merged_with_torch_profiler(real_run, tmp_path):
    """Kineto's record_function regions inside each training step land inside lotus's step slices."""
    from lotus.analysis.runs import load_config

    cfg = load_config(real_run)
    assert cfg.kineto
    s = write_chrome_trace(cfg.events, tmp_path / "m.json", batches=cfg.batches, kineto=cfg.kineto)
    doc = _load(tmp_path / "m.json")
    assert s.kineto_events > 0 and s.flows == 16
    regions = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"]
                     if e.get("ph") == "X" and str(e.get("name", "")).startswith("train_step_"))
    steps = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"] == "step")
    assert len(regions) == len(steps) == 16
    for (rt, rd), (st, sd) in zip(regions, steps, strict=True):
        assert st - 0.001 <= rt and rt + rd <= st + sd + 0.001
    assert _misnested({"traceEvents": [e for e in doc["traceEvents"] if e.get("cat") != "cpu_op"
                                       and "train_step" not in str(e.get("name"))]}) == 0


def test_a_profiler_started_before_the_loader_moves_the_base_back(synth_native, tmp_path):
    """The base is the whole second before the earliest event of either trace: no ts is negative."""
    ev = load_events(synth_native)
    first = int(ev["start_ns"].min())
    kbase = first - 40 * 86_400 * 10**9  # Kineto's own base, weeks before
    early_us = (first - kbase - 1_300_000_000) / 1000  # 1.3 s before lotus's first event
    kineto = {"schemaVersion": 1, "baseTimeNanoseconds": kbase,
              "traceEvents": [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "ts": early_us,
                               "args": {"name": "python"}},
                              {"ph": "X", "name": "aten::empty", "pid": 7, "tid": 7, "ts": early_us + 5, "dur": 1}]}
    (tmp_path / "k.json").write_text(json.dumps(kineto))
    s = write_chrome_trace(ev, tmp_path / "m.json", kineto=[tmp_path / "k.json"])
    doc = _load(tmp_path / "m.json")
    assert s.base_ns == doc["baseTimeNanoseconds"] == (first - 1_300_000_000) // 10**9 * 10**9
    assert min(e["ts"] for e in doc["traceEvents"] if "ts" in e) >= 0
    empty = next(e for e in doc["traceEvents"] if e.get("name") == "aten::empty")
    assert abs(empty["ts"] * 1000 + s.base_ns - (first - 1_300_000_000 + 5_000)) < 2
