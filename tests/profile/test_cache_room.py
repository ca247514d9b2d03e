"""How much page cache a job can have (lotus.profile.pagecache.cache_room): the free memory, or what a memory
cgroup's limit leaves (cgroup v1 and v2, the tightest of the cgroup and its ancestors); and lotus sensitivity's
cache axis stopping there."""

from __future__ import annotations

import os
from pathlib import Path

from lotus.profile import pagecache

GIB = 1 << 30


def _proc(tmp_path: Path, cgroup_line: str, avail_gib: float = 8) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: 99 kB\nMemAvailable: {int(avail_gib * GIB / 1024)} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_v1_limit_less_its_anonymous_memory(tmp_path):
    proc = _proc(tmp_path, "4:memory:/a/b")
    fs = tmp_path / "cg"
    _write(fs / "memory" / "a" / "b" / "memory.limit_in_bytes", f"{2 * GIB}\n")
    _write(fs / "memory" / "a" / "b" / "memory.stat", f"cache 5\nrss {GIB // 2}\nshmem 0\n")
    _write(fs / "memory" / "a" / "memory.limit_in_bytes", "9223372036854771712\n")  # no limit
    assert pagecache.cache_room(str(proc), str(fs)) == (GIB + GIB // 2, "cgroup /a/b")
    _write(fs / "memory" / "a" / "memory.limit_in_bytes", f"{GIB}\n")  # a tighter ancestor wins
    assert pagecache.cache_room(str(proc), str(fs)) == (GIB, "cgroup /a")


def test_v2_without_a_limit_is_the_free_memory(tmp_path):
    proc = _proc(tmp_path, "0::/x", avail_gib=3)
    fs = tmp_path / "cg"
    _write(fs / "cgroup.controllers", "cpu memory\n")
    _write(fs / "x" / "memory.max", "max\n")
    assert pagecache.cache_room(str(proc), str(fs)) == (3 * GIB, "memory")
    _write(fs / "x" / "memory.max", f"{GIB}\n")
    _write(fs / "x" / "memory.stat", f"anon {GIB // 4}\nfile 7\nshmem 0\n")
    assert pagecache.cache_room(str(proc), str(fs)) == (GIB - GIB // 4, "cgroup /x")


def test_nothing_known(tmp_path):
    assert pagecache.cache_room(str(tmp_path / "none"), str(tmp_path / "none")) == (None, None)


def test_this_machine_says_something():
    room, bound = pagecache.cache_room()
    if os.path.exists("/proc/meminfo"):
        assert room is not None and room >= 0 and bound is not None


def test_sensitivity_stops_its_cache_axis_at_the_room(tmp_path, monkeypatch):
    from lotus.launch.runner import Probe
    from lotus.profile.sensitivity import sensitivity
    from lotus.trace.synthetic import PipelineSpec, write_native

    data = tmp_path / "data"
    data.mkdir()
    files = []
    for i in range(8):
        files.append(data / f"{i}.bin")
        files[-1].write_bytes(b"x" * (1 << 20))

    def job(command, options):
        cpus = len(options.cpus)
        w = options.workers if options.workers is not None else cpus
        write_native(options.trace_dir, PipelineSpec(n_batches=32, batch_size=8, n_workers=w, epochs=1, load_ms=2.0,
                                                     ops_ms={"Decode": 4.0}, step_ms=2.0, cpus=cpus,
                                                     seed=cpus * 10 + w))
        if options.list_dataset_files:
            (Path(options.trace_dir) / "lotus-dataset-r0-l0.files").write_text("\n".join(map(str, files)) + "\n")
        return Probe(list(command), options.trace_dir, 0, wall_s=2.0, cpus=options.cpus, workers=w)

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(pagecache, "cache_room", lambda: (4 << 20, "cgroup /job"))  # 4 MiB of an 8 MiB dataset
    p = sensitivity(["job"], tmp_path / "s", cpus_grid=[1, 2], max_probes=3, launcher=job)
    assert max(p.cache_grid_gb) == round((4 << 20) / 1e9, 3) < p.dataset_bytes / 1e9
    assert any("page cache can hold" in n and "cgroup /job" in n for n in p.notes)
    low = next(x for x in p.probes if x["cpus"] == 1)
    assert low["cache"] != "warm" and low["name"].startswith("c1-m")  # a budget it can hold, not "warm"
