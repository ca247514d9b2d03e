"""Plans: start times, environment, trainer commands, CPU sets (no process started here)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from lotus.submit import dispatch
from lotus.submit.apps import AppsError, read_apps
from lotus.submit.curves import fit_curve, workers_for
from lotus.submit.jobs import Outcome
from lotus.submit.plan import PlanOptions, build_plan, find_trainer
from tests.submit.conftest import HEADER, TINY, tiny, write_csv

POOL = list(range(16))


def plan_of(tmp_path, *rows, header=HEADER, curves=None, **kw):
    apps = read_apps(write_csv(tmp_path / "apps.csv", header, *rows))
    opts = PlanOptions(out_dir=tmp_path / "out", data_dir=tmp_path / "data", cpus=kw.pop("cpus", POOL), **kw)
    return build_plan(apps, opts, curves)


def test_sequential_and_concurrent_start_times(tmp_path):
    rows = ["resnet,18,32,4,runs,29500,0,0", "resnet,50,32,4,runs,29501,5,1", "vgg,16,32,4,runs,29502,2.5,"]
    seq = plan_of(tmp_path, *rows)
    assert [p.delay_s for p in seq.apps] == [0, 5, 2.5] and all(p.start_s is None for p in seq.apps)
    con = plan_of(tmp_path, *rows, concurrent=True)
    assert [p.start_s for p in con.apps] == [0, 5, 7.5]  # submit_interval: seconds between starts


def test_environment_and_trainer_command(tmp_path):
    p1, p2, p3 = plan_of(tmp_path, "resnet,18,32,4,runs,29500,0,0", 'resnet,50,64,6,runs,29501,0,"0 1"',
                         "resnet,18,8,,runs,,0,none").apps
    assert p1.env == {"CUDA_VISIBLE_DEVICES": "0", "MASTER_PORT": "29500", "MASTER_ADDR": "127.0.0.1"}
    trainer = str(find_trainer())
    assert p1.command == [sys.executable, trainer, str(tmp_path / "data"), "-a", "resnet18", "-b", "32", "-j", "4"]
    assert p1.workers == 4 and p1.trace_dir == tmp_path / "out" / "runs" / "resnet18-b32-w4"
    # two devices: torchrun, one rank per device, workers split between the ranks, master port from the CSV
    assert p2.env["CUDA_VISIBLE_DEVICES"] == "0,1" and p2.ranks == 2 and p2.workers == 3
    assert p2.command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node" in p2.command and p2.command[p2.command.index("--master-port") + 1] == "29501"
    # 'none': no GPU visible; no workers column: the trainer's own -j
    assert p3.env == {"CUDA_VISIBLE_DEVICES": ""} and "-j" not in p3.command and p3.workers is None


def test_trainer_is_found_next_to_the_package():
    path = find_trainer()
    assert path is not None and path.name == "train_imagenet.py" and path.parent.name == "examples"


def test_command_rows_and_absolute_output_folder(tmp_path):
    p = plan_of(tmp_path, f'a,"{tiny("--n", 8)}",2,{tmp_path / "abs"},3', header="name,command,workers,output_folder,"
                "steps").apps[0]
    assert p.command == [sys.executable, str(TINY), "--n", "8"]
    assert p.trace_dir == tmp_path / "abs" / "a" and p.steps == 3 and p.workers == 2 and p.env == {}


def test_workers_auto_gets_disjoint_contiguous_cpu_sets_from_curves(tmp_path):
    header = "name,command,workers,cpus"
    rows = [f'hungry,"{tiny()}",auto,', f'light,"{tiny()}",auto,', f'fixed,"{tiny()}",3,', f'pinned,"{tiny()}",1,14-15']
    curves = {"hungry": lambda n: 100 * min(n, 8), "light": lambda n: 100 * min(n, 2)}
    plan = plan_of(tmp_path, *rows, header=header, curves=curves, concurrent=True)
    by = {p.name: p for p in plan.apps}
    assert by["pinned"].cpus == [14, 15] and by["pinned"].cpus_source == "csv"
    assert by["fixed"].cpus == [0, 1, 2, 3] and by["fixed"].cpus_source == "workers + 1"
    assert len(by["hungry"].cpus) == 8 and len(by["light"].cpus) == 2
    assert by["hungry"].cpus_source == by["light"].cpus_source == "model"
    assert by["hungry"].workers == 7 and by["light"].workers == 1  # CPUs - 1
    sets = [set(p.cpus) for p in plan.apps]
    assert sum(len(s) for s in sets) == len(set().union(*sets))  # disjoint
    for s in sets:
        assert max(s) - min(s) + 1 == len(s)  # contiguous
    # the same apps without curves: an equal share of the free CPUs, marked provisional
    plan = plan_of(tmp_path, *rows, header=header, concurrent=True)
    by = {p.name: p for p in plan.apps}
    assert len(by["hungry"].cpus) == len(by["light"].cpus) == 5 and "provisional" in by["hungry"].cpus_source


def test_sequential_auto_apps_each_get_what_they_use_of_the_whole_pool(tmp_path):
    rows = [f'a,"{tiny()}",auto', f'b,"{tiny()}",auto']
    plan = plan_of(tmp_path, *rows, header="name,command,workers",
                   curves={"a": lambda n: 10 * min(n, 12), "b": lambda n: 10 * min(n, 3)})
    a, b = plan.apps
    assert a.cpus == list(range(12)) and b.cpus == [0, 1, 2]  # alone on the machine, one after the other


def test_too_many_auto_apps_is_bad_input(tmp_path):
    rows = [f'a{i},"{tiny()}",auto' for i in range(3)]
    with pytest.raises(AppsError, match="need at least 3 CPUs, only 2"):
        plan_of(tmp_path, *rows, header="name,command,workers", concurrent=True, cpus=[0, 1])
    with pytest.raises(AppsError, match=r"column 'cpus'.*not in the CPUs available"):
        plan_of(tmp_path, f'a,"{tiny()}",1,40', header="name,command,workers,cpus")


def test_profiling_glue_probes_then_sizes_from_the_model(tmp_path, monkeypatch):
    """plan_apps: one short probe per auto app through the executor, then curves fitted on the probes."""
    rows = [f'hungry,"{tiny()}",auto', f'light,"{tiny()}",auto', f'fixed,"{tiny()}",1']
    apps = read_apps(write_csv(tmp_path / "apps.csv", "name,command,workers", *rows))
    opts = PlanOptions(out_dir=tmp_path / "out", concurrent=True, cpus=POOL, probe_steps=7)
    seen = []

    class FakeExecutor:
        def run(self, specs, *, concurrent, delays_s=None):
            seen.extend(specs)
            assert not concurrent  # probes one at a time: each sees the machine alone
            return [Outcome(s.name, s.trace_dir, 0, 1.0, traced=True) for s in specs]

    fitted = {}

    def fake_fit(trace_dir, ranks=1):
        name = Path(trace_dir).name.split("-", 1)[1]
        fitted[name] = trace_dir
        return {"hungry": lambda n: 50 * min(n, 9), "light": lambda n: 50 * min(n, 3)}[name]

    monkeypatch.setattr(dispatch, "fit_curve", fake_fit)
    plan, probes = dispatch.plan_apps(apps, opts, FakeExecutor())
    assert [s.name for s in seen] == ["hungry", "light"] and all(s.kind == "probe" for s in seen)
    assert all(s.steps == 7 and s.cpus == tuple(POOL) and s.workers == 8 for s in seen)
    assert all("/probes/" in s.trace_dir for s in seen) and set(fitted) == {"hungry", "light"}
    by = {p.name: p for p in plan.apps}
    assert len(by["hungry"].cpus) == 9 and len(by["light"].cpus) == 3 and by["fixed"].cpus == [0, 1]
    assert len(probes) == 2


def test_fit_curve_on_a_synthetic_trace_of_known_truth(tmp_path):
    """The real model glue: an input-bound job gains from CPUs until its step time caps it."""
    pytest.importorskip("lotus.model")
    from lotus.trace.synthetic import PipelineSpec, write_native

    write_native(tmp_path / "run", PipelineSpec(n_batches=120, batch_size=16, n_workers=2, cpus=4, load_ms=4.0,
                                                ops_ms={"op": 1.0}, step_ms=30.0, seed=3))
    curve = fit_curve(tmp_path / "run")
    rates = [curve(n) for n in (1, 2, 3, 4, 6, 8, 12)]
    assert all(b >= a * 0.97 for a, b in itertools.pairwise(rates))  # more CPUs never hurt (noise aside)
    cap = 16 / 0.030  # the step time's ceiling, samples/s
    assert rates[0] < 0.5 * cap and rates[-1] == pytest.approx(cap, rel=0.15)
    assert workers_for(1) == 1 and workers_for(8) == 7 and workers_for(8, ranks=2) == 3
