"""lotus.launch: run any command traced by lotus, without editing it.

    from lotus.launch import LaunchOptions, launch
    probe = launch(["python", "train.py"], LaunchOptions(steps=50, workers=4))
    probe.exit_code, probe.trace_dir, probe.samples_per_s

The command's Python processes (and every torchrun rank, and DataLoader workers started with spawn or
forkserver) import a start-up hook (:mod:`lotus.launch.hook`, reached through a ``sitecustomize`` on
``PYTHONPATH``) that makes ``torch.utils.data.DataLoader`` lotus's as soon as torch is imported. The
overrides (``--workers``, ``--steps``, ``--cpus``...) travel in environment variables
(:mod:`lotus.launch.options`). This is the one launcher of lotus: ``lotus run``, tuning, sensitivity
profiling and the multi-app dispatcher all start processes through :func:`launch`; :class:`Series`
(:mod:`lotus.launch.series`) runs several probes in one launched process (``lotus tune``).

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

__all__ = ["LaunchOptions", "Probe", "Series", "launch"]


def __getattr__(name: str):
    if name == "LaunchOptions":
        from lotus.launch.options import LaunchOptions

        return LaunchOptions
    if name in ("Probe", "launch"):
        from lotus.launch import runner

        return getattr(runner, name)
    if name == "Series":
        from lotus.launch.series import Series

        return Series
    raise AttributeError(f"module 'lotus.launch' has no attribute {name!r}")
