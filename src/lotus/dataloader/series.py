"""Probe series: several probes of one job in ONE process (``$LOTUS_PROBE_SERIES=DIR``, set by
:class:`lotus.launch.series.Series` for ``lotus tune``).

A probe of its own process pays the job's start-up every time (Python, torch, CUDA, the model, the dataset's
listing): on the GPU host about 15 of a probe's 24 s. In a series, when a probe ends (its stop rule fired,
:mod:`lotus.dataloader.probe`), :func:`next_probe` closes that probe's trace as a plain probe end does (the
epoch's end record, this iterator's workers stopped, every main-process file closed, the marker written), then
waits for ``DIR/next-K.json`` from the launcher: ``{"stop": true}`` ends the job (``SystemExit(0)``, as a plain
probe does); otherwise its ``env`` (the keys of :data:`lotus._env.PROBE_KEYS`: the next probe's trace directory,
forced settings and stop rule) goes into ``os.environ``, the loader takes the forced settings (the script's
own for the rest, made consistent as :mod:`lotus.dataloader.overrides` does at construction), gets a new
:class:`lotus.dataloader.loadertrace.LoaderTrace` (same loader id) and a new iterator, and the iterator the training
loop holds becomes it (:func:`lotus.dataloader._torch_compat.become`): the loop's ``for`` goes on with the
next probe's batches, from the start of a new pass of the sampler.

Another loader of the job still tracing into an earlier probe's directory (a validation loader) goes on
untraced when it reaches the step limit, and ends no probe. One rank only (ranks that switched at different
steps would leave a collective waiting): a job of several ranks, or a switch that fails, ends the job as a
plain probe does, and the launcher starts the next probe as a process of its own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lotus import _env
from lotus._warn import warn_once

WAIT_S = 600.0  # a launcher silent this long is gone: the job ends
_POLL_S = 0.01
_probe = 0  # the probe this process runs now (0: the one it was started for)
_SETTINGS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "in_order", "timeout",
             "multiprocessing_context")


def control_dir() -> str | None:
    return os.environ.get(_env.PROBE_SERIES, "").strip() or None


def next_probe(lt, iterator, why: str, control: str) -> None:
    """End the probe of ``lt`` and turn ``iterator`` into the next probe's (see the module doc); raises
    ``SystemExit(0)`` when the series is over, the job has several ranks, or the switch fails."""
    from lotus.dataloader.probe import end_job, finish_probe

    global _probe
    loader_ref = getattr(iterator, "_lotus_loader", None)
    loader = loader_ref() if loader_ref is not None else None
    if lt.world_size > 1 or loader is None or not lt.on:
        end_job(lt, iterator, why)
    now = os.environ.get(_env.TRACE_DIR)
    if now and os.path.abspath(lt.trace_dir) != os.path.abspath(now):
        # another loader of the job (a validation loader), still tracing into an earlier probe's directory, whose
        # files are closed: it goes on untraced and ends no probe
        lt.stop_after = lt.stop_rule = None
        lt.fail("probe series", RuntimeError("its probe is over"))
        return
    finish_probe(lt, iterator, why)
    k = _probe + 1  # one count for the process, whichever loader ends a probe
    doc = _wait(Path(control) / f"next-{k}.json")
    if not doc or doc.get("stop"):
        raise SystemExit(0)
    try:
        _switch(loader, lt, iterator, doc, k)
    except Exception as exc:  # never a half-switched loader: the job ends as a plain probe's does
        warn_once("probe-series", f"lotus: cannot start the next probe in this process ({exc!r}); ending the job")
        raise SystemExit(0) from None
    _probe = k


def _wait(path: Path) -> dict | None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            time.sleep(_POLL_S)
        except (OSError, ValueError):  # written by rename, so whole; unreadable means no next probe
            return None
    return None


def _switch(loader, lt, iterator, doc: dict, k: int) -> None:
    from lotus.dataloader import _torch_compat as compat
    from lotus.dataloader import overrides

    env = doc.get("env") or {}
    for key in _env.PROBE_KEYS:
        value = env.get(key)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = str(value)
    forced = overrides.from_env()
    apply_settings(loader, forced)
    # a LoaderTrace (lotus.dataloader.loader, which imports this module's caller: taken from ``lt``, no cycle)
    new_lt = type(lt)(loader, env[_env.TRACE_DIR], lt.itt, lt.name, lt.telemetry, lt.budget,
                      loader_id=lt.loader_id)
    if not new_lt.on:
        raise RuntimeError(f"no trace in {env[_env.TRACE_DIR]}")
    new_lt.segment = k
    new_lt.epoch = 0
    loader._lotus = new_lt
    new = loader._get_iterator()
    compat.become(iterator, new)
    if loader.persistent_workers and loader.num_workers > 0:
        compat.keep_persistent_iterator(loader, iterator)  # the next epoch resets this one, as torch would
    else:
        compat.drop_persistent_iterator(loader)


def apply_settings(loader, forced: dict) -> dict:
    """Give ``loader`` the script's own settings with ``forced`` over them, made consistent as a DataLoader
    built with them would be (no workers: torch's defaults for the worker-only settings; workers with no
    prefetch factor: torch's 2). Returns what was set."""
    from lotus.dataloader import _torch_compat as compat
    from lotus.dataloader.overrides import NO_WORKERS

    script = getattr(loader, "_lotus_script", None)
    if script is None:  # the first switch: what the script asked for, forced keys put back
        script = {k: getattr(loader, k) for k in _SETTINGS if hasattr(loader, k)}
        script.update({k: v for k, v in (getattr(loader, "_lotus_requested", None) or {}).items() if k in script})
        loader._lotus_script = script
    new = {**script, **{k: v for k, v in forced.items() if k in script}}
    if not new.get("num_workers"):
        new.update({k: v for k, v in NO_WORKERS.items() if k in new})
    elif new.get("prefetch_factor") is None:
        new["prefetch_factor"] = 2
    compat.set_loader_setting(loader, "num_workers", new["num_workers"])
    for key, value in new.items():
        if key != "num_workers" and getattr(loader, key, None) is not value and getattr(loader, key, None) != value:
            compat.set_loader_setting(loader, key, value)
    loader._lotus_overrides = dict(forced)
    loader._lotus_requested = {k: script.get(k) for k in forced}
    loader._lotus_requested_workers = loader._lotus_requested.get("num_workers")
    if "num_workers" in forced:
        loader._lotus_auto = None  # num_workers="auto" gives way to the forced count, as at construction
    return new
