"""DataLoader settings forced from outside the script (``lotus run --workers N --set KEY=VALUE``).

``LOTUS_WORKERS`` (num_workers) and ``LOTUS_LOADER_ARGS`` (a JSON object) name settings that every
DataLoader of the job gets instead of what the script passed; tuning and profiling probes use them.
Only settings that change how data is loaded, never what data: ``num_workers``, ``prefetch_factor``,
``pin_memory``, ``persistent_workers``, ``in_order``. Combinations torch refuses are made consistent:
without workers, worker-only settings the script passed (persistent_workers, prefetch_factor,
timeout, multiprocessing_context) fall back to torch's defaults. The loader description records what
was forced and what the script had asked for.
"""

from __future__ import annotations

import inspect
import json
import os

from lotus import _env

OVERRIDABLE: dict[str, type] = {"num_workers": int, "prefetch_factor": int, "pin_memory": bool,
                                "persistent_workers": bool, "in_order": bool}
NO_WORKERS = {"persistent_workers": False, "prefetch_factor": None, "timeout": 0, "multiprocessing_context": None}


def check(key: str, value):
    """``value`` converted for setting ``key``; ValueError with a readable message when it cannot be."""
    kind = OVERRIDABLE.get(key)
    if kind is None:
        raise ValueError(f"{key!r} cannot be set from outside (settable: {', '.join(OVERRIDABLE)})")
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key}={value!r}: expected true or false")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={value!r}: expected a whole number") from None
    if n < 0 or (key == "prefetch_factor" and n < 1):
        raise ValueError(f"{key}={value!r}: out of range")
    return n


def from_env() -> dict:
    """The settings forced on this process's DataLoaders (empty: none). Bad values are ignored."""
    out: dict = {}
    text = os.environ.get(_env.LOADER_ARGS, "").strip()
    if text:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = {}
        for k, v in (doc.items() if isinstance(doc, dict) else ()):
            try:
                out[k] = check(k, v)
            except ValueError:
                continue
    workers = os.environ.get(_env.WORKERS, "").strip()
    if workers:
        try:
            out["num_workers"] = check("num_workers", workers)
        except ValueError:
            pass
    return out


def apply(signature: inspect.Signature, args: tuple, kwargs: dict, forced: dict) -> tuple[tuple, dict, dict]:
    """``(args, kwargs)`` of a DataLoader call with ``forced`` settings, and what the script had asked for."""
    params = list(signature.parameters)[1:]
    bound = signature.bind_partial(None, *args, **kwargs).arguments
    requested = {k: bound.get(k, signature.parameters[k].default if k in signature.parameters else None)
                 for k in forced}
    args = list(args)

    def put(name, value):
        i = params.index(name) if name in params else -1
        if 0 <= i < len(args):
            args[i] = value
        elif name in params or name in kwargs:
            kwargs[name] = value

    for k, v in forced.items():
        put(k, v)
    workers = forced.get("num_workers", bound.get("num_workers", 0))
    if not workers:  # torch refuses these without workers, whoever set them
        for k, v in NO_WORKERS.items():
            put(k, v)
    return tuple(args), kwargs, requested
