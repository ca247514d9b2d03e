"""Apps -> plan: each app's command, environment, trace directory, start time, CPU set and workers.

Pure except for reading the CPU affinity and locating the example trainer; nothing starts here. CPU sets
of ``workers=auto`` apps come from :func:`lotus.submit.allocator.allocate` over the apps' throughput
curves (given by the caller: see :mod:`lotus.submit.curves`); without a curve an auto app gets an equal
share (marked provisional in the plan).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lotus.launch.options import format_cpus
from lotus.submit.allocator import AllocationError, Curve, allocate, contiguous_sets, equal_split
from lotus.submit.apps import AppsError, AppSpec
from lotus.submit.curves import workers_for
from lotus.submit.jobs import LaunchSpec

_log = logging.getLogger("lotus.submit")
TRAINER = "train_imagenet.py"


@dataclass
class PlanOptions:
    out_dir: Path
    concurrent: bool = False
    data_dir: Path | None = None  # the trainer's ImageFolder
    trainer: Path | None = None  # default: examples/train_imagenet.py next to the lotus package
    steps: int | None = None  # default steps per app (a row's `steps` wins)
    probe_steps: int = 600  # workers=auto profiling probes: the cap (the one probe protocol ends them earlier)
    probe_precision: float | None = 0.03
    probe_max_seconds: float | None = 90.0
    cpus: list[int] | None = None  # the CPU pool (default: this process's affinity)
    timeout_s: float | None = None  # default per app (a row's `timeout_s` wins)
    trial_s: float = 0.0  # concurrent workers=auto: seconds of each side-by-side trial (lotus.submit.trial); 0: none
    refine: bool = True  # a second allocation round from the disjoint trial's rates (a third trial when it differs)


@dataclass
class AppPlan:
    app: AppSpec
    command: list[str]
    trace_dir: Path
    env: dict[str, str]
    ranks: int
    workers: int | None  # per rank, passed as LaunchOptions.workers (None: the job's own)
    cpus: list[int] | None  # affinity (None: not pinned)
    cpus_source: str  # "csv", "model", "equal split (provisional)", "equal split", "workers + 1", "-"
    delay_s: float  # before it starts: after the previous start (concurrent) / end (sequential)
    start_s: float | None  # concurrent: seconds after the first start; sequential: None (depends on runs)
    steps: int | None
    timeout_s: float | None

    @property
    def name(self) -> str:
        return self.app.name

    @property
    def n_cpus(self) -> int | None:
        if self.cpus:
            return len(self.cpus)
        return None if self.workers is None else (self.workers + 1) * self.ranks

    def spec(self) -> LaunchSpec:
        return LaunchSpec(name=self.name, command=tuple(self.command), trace_dir=str(self.trace_dir),
                          workers=self.workers, cpus=tuple(self.cpus) if self.cpus else None, env=dict(self.env),
                          steps=self.steps, timeout_s=self.timeout_s, n_cpus=self.n_cpus,
                          gpus=len(self.app.cuda_devices or ()))

    def to_dict(self) -> dict:
        return {"row": self.app.row, "name": self.name, "command": self.command, "trace_dir": str(self.trace_dir),
                "env": self.env, "ranks": self.ranks, "workers": self.workers, "workers_auto": self.app.workers_auto,
                "cpus": format_cpus(self.cpus) if self.cpus else None, "cpus_source": self.cpus_source,
                "delay_s": self.delay_s, "start_s": self.start_s, "steps": self.steps, "timeout_s": self.timeout_s}


@dataclass
class Plan:
    apps: list[AppPlan]
    concurrent: bool
    pool: list[int]
    out_dir: Path
    options: PlanOptions
    notes: list[str] = field(default_factory=list)
    curves: dict = field(default_factory=dict, repr=False)  # the auto apps' throughput curves it was sized from

    @property
    def mode(self) -> str:
        return "concurrent" if self.concurrent else "sequential"

    def to_dict(self) -> dict:
        return {"mode": self.mode, "out_dir": str(self.out_dir), "cpus": format_cpus(self.pool),
                "apps": [a.to_dict() for a in self.apps], "notes": self.notes}


def find_trainer(explicit: str | os.PathLike | None = None) -> Path | None:
    """The example trainer: ``explicit``, else examples/train_imagenet.py of the lotus checkout (src
    layout, editable install), else ./examples/train_imagenet.py."""
    if explicit is not None:
        return Path(explicit)
    import lotus

    here = Path(lotus.__file__).resolve()
    for cand in (here.parents[2] / "examples" / TRAINER, Path.cwd() / "examples" / TRAINER):
        if cand.is_file():
            return cand
    return None


def cpu_pool(cpus: list[int] | None = None) -> list[int]:
    if cpus:
        return sorted(set(cpus))
    from lotus._cpus import allowed

    return allowed()


def _fail(app: AppSpec, column: str, msg: str) -> AppsError:
    return AppsError(f"{app.where(column)}: {msg}")


def _command(app: AppSpec, opts: PlanOptions, workers: int | None) -> list[str]:
    if app.command is not None:
        return list(app.command)
    trainer = opts.trainer or find_trainer()
    if trainer is None or not Path(trainer).is_file():
        raise _fail(app, "command", "no command and the example trainer was not found (pass --trainer PATH)")
    if opts.data_dir is None:
        raise _fail(app, "arch", "the example trainer needs a dataset: pass --data DIR (and --generate N to make one)")
    ranks = app.ranks
    if ranks > 1:
        head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--nnodes", "1",
                "--master-addr", "127.0.0.1", "--master-port", str(app.port or 29500)]
    else:
        head = [sys.executable]
    cmd = [*head, str(trainer), str(opts.data_dir), "-a", str(app.model), "-b", str(app.batch)]
    if workers is not None:
        cmd += ["-j", str(workers)]
    return cmd + list(app.args)


def rebuild_command(p: AppPlan, opts: PlanOptions, workers: int | None) -> list[str]:
    """``p``'s command with ``workers`` per rank (a row with its own ``command`` keeps it)."""
    return _command(p.app, opts, workers)


def _env(app: AppSpec) -> dict[str, str]:
    env: dict[str, str] = {}
    if app.cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in app.cuda_devices)
    if app.port is not None:
        env["MASTER_PORT"] = str(app.port)
        env.setdefault("MASTER_ADDR", "127.0.0.1")
    return env


def _trace_dir(app: AppSpec, out_dir: Path) -> Path:
    folder = Path(app.output_folder or ".")
    base = folder if folder.is_absolute() else out_dir / folder
    return base / app.name


def probe_dir(app: AppSpec, out_dir: Path) -> Path:
    """Where the workers=auto profiling probe of ``app`` goes (outside the apps' output folders)."""
    return out_dir / "probes" / f"row{app.row}-{app.name}"


def _cpu_sets(apps: list[AppSpec], opts: PlanOptions, pool: list[int], curves: dict[str, Curve],
              notes: list[str]) -> dict[str, tuple[list[int] | None, str]]:
    """CPU set and its source per app name."""
    out: dict[str, tuple[list[int] | None, str]] = {}
    for a in apps:
        if a.cpus is not None:
            bad = sorted(set(a.cpus) - set(pool))
            if bad:
                raise _fail(a, "cpus", f"CPU(s) {format_cpus(bad)} not in the CPUs available ({format_cpus(pool)})")
            out[a.name] = (list(a.cpus), "csv")
    if opts.concurrent:
        fixed_sets = [(a.name, set(a.cpus)) for a in apps if a.cpus is not None]
        for (n1, s1), (n2, s2) in itertools.combinations(fixed_sets, 2):
            if s1 & s2:
                notes.append(f"{n1} and {n2} share CPU(s) {format_cpus(s1 & s2)} (their `cpus` columns)")
    auto = [a for a in apps if a.workers_auto and a.cpus is None]
    if opts.concurrent and auto:  # fixed apps get CPUs of their own too, so that the sets stay disjoint
        taken = {c for a in apps if a.name in out for c in out[a.name][0]}
        fixed = [a for a in apps if a.name not in out and not a.workers_auto]
        sizes = {}
        for a in fixed:
            if a.workers is None:
                notes.append(f"{a.name}: workers not given, not pinned: it may share the auto apps' CPUs")
            else:
                sizes[a.name] = (math.ceil(a.workers / a.ranks) + 1) * a.ranks
        free = [c for c in pool if c not in taken]
        if sizes and sum(sizes.values()) + sum(a.ranks for a in auto) > len(free):
            notes.append(f"{len(free)} free CPUs are too few for the fixed apps' workers + 1 and the auto apps: "
                         f"fixed apps not pinned ({', '.join(sizes)})")
            sizes = {}
        for name, cpus in contiguous_sets(sizes, free).items():
            out[name] = (cpus, "workers + 1")
        taken |= {c for n in sizes for c in out[n][0]}
        free = [c for c in pool if c not in taken]
        groups = [auto]
    else:
        free = pool
        groups = [[a] for a in auto]  # sequential: each auto app alone on the pool
    for group in groups:
        minimum = {a.name: a.ranks for a in group}
        have = {a.name: curves[a.name] for a in group if a.name in curves}
        try:
            if len(have) == len(group):
                sizes, how = allocate(have, len(free), minimum=minimum), "model"
            else:
                sizes, how = equal_split([a.name for a in group], len(free), minimum=minimum), "equal split"
                if len(group) > len(have):
                    how += " (provisional)"
        except AllocationError as exc:
            raise AppsError(f"workers=auto: {exc}") from None
        for name, cpus in contiguous_sets(sizes, free).items():
            out[name] = (cpus, how)
    return out


def build_plan(apps: list[AppSpec], opts: PlanOptions, curves: dict[str, Curve] | None = None) -> Plan:
    """The plan of ``apps`` (raises :class:`AppsError` for what cannot run: no dataset, too few CPUs...)."""
    pool = cpu_pool(opts.cpus)
    notes: list[str] = []
    sets = _cpu_sets(apps, opts, pool, curves or {}, notes)
    plans, t = [], 0.0
    ports: dict[int, str] = {}
    for a in apps:
        cpus, source = sets.get(a.name, (None, "-"))
        if a.workers_auto:
            workers = workers_for(len(cpus), a.ranks) if cpus else 1
        else:
            workers = None if a.workers is None else math.ceil(a.workers / a.ranks) if a.workers else 0
        t += a.submit_interval_s
        if opts.concurrent and a.port is not None:
            if a.port in ports:
                notes.append(f"{a.name}: port {a.port} is {ports[a.port]}'s too: DDP apps running at once collide")
            ports[a.port] = a.name
        plans.append(AppPlan(app=a, command=_command(a, opts, workers), trace_dir=_trace_dir(a, opts.out_dir),
                             env=_env(a), ranks=a.ranks, workers=workers, cpus=cpus, cpus_source=source,
                             delay_s=a.submit_interval_s, start_s=t if opts.concurrent else None,
                             steps=a.steps or opts.steps, timeout_s=a.timeout_s or opts.timeout_s))
    return Plan(apps=plans, concurrent=opts.concurrent, pool=pool, out_dir=opts.out_dir, options=opts, notes=notes,
                curves=dict(curves or {}))


def probe_specs(plan: Plan, steps: int, have: set[str] | frozenset = frozenset(), *, precision: float | None = None,
                max_seconds: float | None = None) -> list[LaunchSpec]:
    """Short profiling probes (``steps`` batches, on the whole pool) of the auto apps without a curve.

    A probe runs min(8, pool - 1) workers per rank (at least 1); the model then predicts other counts."""
    out = []
    for p in plan.apps:
        if not p.app.workers_auto or p.app.cpus is not None or p.name in have:
            continue
        workers = min(8, workers_for(len(plan.pool), p.ranks))
        spec = p.spec()
        out.append(LaunchSpec(name=p.name, command=tuple(_command(p.app, plan.options, workers)),
                              trace_dir=str(probe_dir(p.app, plan.out_dir)), workers=workers,
                              cpus=tuple(plan.pool), env=spec.env, steps=steps, timeout_s=spec.timeout_s,
                              n_cpus=len(plan.pool), gpus=spec.gpus, kind="probe", precision=precision,
                              max_seconds=max_seconds))
    return out
