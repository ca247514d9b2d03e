"""``tune(command, ...)``: the search of :mod:`lotus.tune.core` on real probes.

Probes run through :func:`lotus.launch.launch` (``workers=N``, ``steps=S``, ``loader_args`` for the other
settings, ``cpus`` for the affinity, output captured), each into its own trace directory under ``out``
(``p00-baseline``, ``p01-num_workers``...). A probe follows the one probe protocol: it ends once its
steady rate's 95% interval is within ``precision`` (see :mod:`lotus.dataloader.probe`), or lies wholly under the
rate it must reach to be chosen (``below``, from the best measured so far), or at its caps:
``steps`` batches after its ramp (``num_workers x prefetch_factor`` batches), ``max_seconds``. With
``precision`` None it runs ``steps`` batches after its ramp (the baseline, whose settings are unknown until
its trace is read, ``2 x steps``); an epoch-crossing probe always runs its fixed length. With ``one_process``
(the default of :func:`tune`) the probes run one after another in the job's one process
(:class:`lotus.launch.series.Series`): the start-up is paid once; an epoch-crossing probe, and every probe after
the series' job ended, is a process of its own (docs/tune.md "Probes in one process"). The model is
:func:`lotus.model.fit` on the traces of every successful probe so far. Nothing here starts a process or fits
a curve by itself.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from lotus._cpus import allowed as allowed_cpus
from lotus.tune.core import TuneOptions, run_tuning
from lotus.tune.types import LoaderSettings, Measurement, TuneResult

_log = logging.getLogger("lotus.tune")
TAIL_CHARS = 2000


WAVES = 2  # the measured window spans at least this many rounds of all workers


def probe_steps(steps: int, settings: LoaderSettings, own: LoaderSettings | None = None, *,
                adaptive: bool = False) -> int:
    """Batches a probe runs: ``steps`` after the ramp (2 x steps for the job's own, unknown, settings; with
    ``adaptive`` probes, which end once their interval is narrow enough, ``steps`` is the cap), and
    at least WAVES x num_workers after it: workers started together hand their batches over in bursts of
    num_workers, so a window of fewer batches than a few bursts measures the bursts' phase, not the rate
    (on the H100 host, 15 batches after the ramp read 1,133 to 4,959 samples/s at 11-16 workers)."""
    from lotus.analysis.throughput import ramp_batches

    if settings.num_workers is None and own is None:
        return steps if adaptive else 2 * steps
    eff = settings.over(own) if own is not None else settings
    ramp = ramp_batches({"num_workers": eff.num_workers, "prefetch_factor": eff.prefetch_factor})
    if not eff.num_workers:
        return steps
    return max(steps, WAVES * eff.num_workers) + ramp


def measurement_of(probe, settings: LoaderSettings, steps: int | None) -> Measurement:
    """A launcher Probe -> Measurement (samples/s from the trace, the loader's settings, epoch facts)."""
    from lotus.tune import traceinfo

    m = Measurement(settings=settings, samples_per_s=None, wall_s=probe.wall_s, exit_code=probe.exit_code,
                    trace_dir=str(probe.trace_dir) if probe.trace_dir is not None else None, steps=steps)
    if probe.exit_code != 0:
        m.stderr_tail = probe.stderr_tail()[-TAIL_CHARS:]
    try:
        summary = probe.summary()
    except Exception as exc:  # a damaged trace: the probe counts as failed, the search goes on
        m.traced, m.stderr_tail = False, (m.stderr_tail + f"\nlotus: the trace could not be read: {exc}").strip()
        return m
    m.traced = bool(summary.get("traced"))
    if not m.traced:
        return m
    m.samples_per_s, m.wait_share = summary.get("samples_per_s"), summary.get("wait_share")  # ramp left out
    m.ci95 = tuple(summary["ci95"]) if summary.get("ci95") else None
    m.within_rel_halfwidth = summary.get("within_rel_halfwidth")
    m.stopped_by, m.note = probe.stopped_by, summary.get("note")
    try:
        from lotus.model import load_run

        run = load_run(probe.trace_dir)
    except Exception as exc:
        _log.warning("cannot read the trace of %s: %s", probe.trace_dir, exc)
        return m
    desc = traceinfo.description(run.loaders, run.batches)
    m.effective = traceinfo.effective_settings(desc)
    m.cuda = traceinfo.used_cuda(run.batches)
    m.ranks = traceinfo.ranks(run.batches)
    m.epochs = traceinfo.epoch_facts(run.events, run.batches, desc)
    m.run = run
    rate = m.samples_per_s
    if rate:
        bs = desc.get("batch_size")
        if isinstance(bs, int) and bs > 0:  # the loop's steady time per batch, ramp left out
            m.epochs.batch_interval_s = bs * m.ranks / rate
    return m


class JobProber:
    """``probe(settings, phase, steps) -> Measurement`` by launching the job (see the module doc)."""

    def __init__(self, command: list[str], out: Path, *, steps: int, cpus: list[int] | None,
                 timeout_s: float | None, progress: Callable[[str], None] | None = None,
                 precision: float | None = None, max_seconds: float | None = None, one_process: bool = False):
        self.command, self.out, self.steps, self.cpus = command, out, steps, cpus
        self.series = None  # probes in one process of the job (lotus.launch.series), while it lasts
        if one_process:
            from lotus.launch.series import Series

            self.series = Series(command, out / "series")
        self.precision, self.max_seconds = precision or None, max_seconds
        self.timeout_s, self.progress = timeout_s, progress
        self.count = 0
        self.first_wall_s: float | None = None
        self.own: LoaderSettings | None = None  # the job's own settings, once the baseline told them

    def close(self) -> None:
        """End the series' job, if one is running."""
        if self.series is not None:
            self.series.close()

    def __call__(self, settings: LoaderSettings, phase: str, steps: int | None = None,
                 below: float | None = None) -> Measurement:
        from lotus.launch import LaunchOptions, launch

        fixed = steps is not None  # an epoch-crossing probe: exactly this many batches
        steps = max(steps or 0, probe_steps(self.steps, settings, self.own, adaptive=bool(self.precision)))
        precision = None if fixed else self.precision
        below = below if precision else None  # a probe of fixed length (an epoch crossing) runs it whole
        name = f"p{self.count:02d}-{phase}"
        self.count += 1
        if self.progress is not None:
            self.progress(f"probe {name}: {settings.label()}, {steps} steps")
        timeout = self.timeout_s
        if timeout is None and self.first_wall_s is not None:  # a probe far slower than the job's own is cut
            timeout = max(120.0, 5 * self.first_wall_s * steps / (2 * self.steps))
            if precision:
                timeout = max(120.0, 3 * self.first_wall_s, 1.5 * (self.max_seconds or 0.0) + 60.0)
        options = LaunchOptions(
            trace_dir=self.out / name, steps=steps, workers=settings.num_workers, loader_args=settings.loader_args(),
            cpus=self.cpus, capture=True, timeout_s=timeout, precision=precision,
            max_seconds=self.max_seconds if precision else None, below=below)
        series = self.series
        started = time.time()
        # the control probe runs in a process of its own: separate runs of a job differ by more than the probes of
        # one process (each run sets its own pace), and that is what its pair must be able to show
        in_series = series is not None and not fixed and phase != "control" and (not series.started or series.alive)
        if in_series:
            try:  # the next probe in the job's running process: no start-up
                probe = series.probe(options, timeout_s=timeout)
            except BaseException:
                series.kill()
                raise
        else:  # a process of its own (an epoch-crossing probe, or the series' job has ended)
            if series is not None:
                series.close()  # the series' job would hold its memory (the GPU's too) while this one runs
            probe = launch(self.command, options)
        if probe.stopped == "interrupt":  # Ctrl-C reached the job: stop tuning (the traces so far stay)
            raise KeyboardInterrupt
        if self.first_wall_s is None:
            self.first_wall_s = probe.wall_s
        m = measurement_of(probe, settings, steps)
        m.started_unix_s = started
        if in_series and probe.steps_reached:
            m.in_series = series.k
        if self.own is None and m.effective is not None:
            self.own = m.effective
        _log.info("%s: %s samples/s (95%% CI %s), ended by %s, exit code %d, %.1f s", name,
                  f"{m.samples_per_s:,.1f}" if m.samples_per_s else "-",
                  "-".join(f"{v:,.1f}" for v in m.ci95) if m.ci95 else "none", m.stopped_by, m.exit_code, m.wall_s)
        return m


def fit_model(measurements: list[Measurement]):
    """:func:`lotus.model.fit` on the traces of ``measurements``."""
    from lotus.model import fit
    from lotus.model.workerpath import price

    runs = [m.run if m.run is not None else m.trace_dir for m in measurements if m.trace_dir or m.run is not None]
    model = fit(runs)
    price(model)  # from num_workers=0 probes only: the worker path's cost of their batches' bytes
    return model


def tune(command: list[str], *, out: str | os.PathLike | None = None, steps: int = 600,
         precision: float | None = 0.03, max_seconds: float | None = 90.0,
         cpus: list[int] | None = None, budget_minutes: float | None = 10.0, max_probes: int = 12,
         max_workers: int | None = None, tolerance: float = 0.05, near_best: float = 0.02, min_gain: float = 0.02,
         only: tuple[str, ...] | None = None, timeout_s: float | None = None,
         progress: Callable[[str], None] | None = None, one_process: bool = True, control: bool = True) -> TuneResult:
    """Find the DataLoader settings that maximise the samples/s of ``command`` (see docs/tune.md).

    Raises :class:`lotus.launch.runner.CommandNotFound` / ``LaunchError`` before anything runs, and
    :class:`lotus.tune.types.TuneError` when the job's own run fails or creates no DataLoader."""
    from lotus.launch.options import default_trace_dir, script_name
    from lotus.launch.runner import check_cpus, resolve_command

    command = resolve_command(list(command))
    check_cpus(cpus)
    out = Path(out) if out is not None else default_trace_dir([f"tune-{script_name(command)}"])
    out.mkdir(parents=True, exist_ok=True)
    options = TuneOptions(steps=steps, precision=precision, max_seconds=max_seconds, budget_minutes=budget_minutes,
                          max_probes=max_probes, max_workers=max_workers, tolerance=tolerance, near_best=near_best,
                          min_gain=min_gain, control=control, **({"only": tuple(only)} if only else {}))
    prober = JobProber(command, out, steps=steps, cpus=cpus, timeout_s=timeout_s, progress=progress,
                       precision=precision, max_seconds=max_seconds, one_process=one_process)
    n_cpus = len(cpus) if cpus else len(allowed_cpus())
    try:
        result = run_tuning(prober, fit_model, cpus=float(n_cpus), options=options, command=command)
    finally:
        prober.close()
    result.out = str(out)
    from lotus.analysis.jsonutil import dumps

    try:
        (out / "tune.json").write_text(dumps(result.to_dict()))
    except OSError as exc:
        _log.warning("cannot write %s: %s", out / "tune.json", exc)
    return result


__all__ = ["JobProber", "allowed_cpus", "fit_model", "measurement_of", "probe_steps", "tune"]
