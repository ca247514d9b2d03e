"""A trace file's JSON header (docs/trace-format.md): who wrote the file, its clock anchor, the host's boot id.

The header is assembled from what every header of one process holds, encoded once and cached (in the main
process, before its DataLoader workers fork: they inherit it), and the per-writer fields formatted without json
where they are plain values: json's first use in a new process faults in ~60-90 copy-on-write pages (~0.3-0.4 ms
of CPU a worker on a VM), before its first batch. The bytes are ``json.dumps(header, separators=(",", ":"))``
(tests/trace/test_writer_header.py builds that reference and compares), extra fields included.
"""

from __future__ import annotations

import json
import math
import socket
import sys

from lotus import __version__
from lotus.trace import schema as S

_BOOT_ID: str | None = None  # read once per host boot; a forked worker inherits it
_CACHE: dict = {}
KEYS = frozenset(("format", "version", "role", "pid", "rank", "world_size", "worker_id", "hostname", "boot_id",
                  "anchor_wall_ns", "anchor_mono_ns", "clock", "lotus_version", "torch_version", "argv",
                  "builtin_events"))


def boot_id() -> str:
    """This host's boot id (the clock domain of ``time.monotonic_ns``; the host name where there is none)."""
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _BOOT_ID = f.read().strip()
        except OSError:
            _BOOT_ID = socket.gethostname()
    return _BOOT_ID


def _json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _value(v) -> str:
    """``v`` as json.dumps writes it: plain values formatted here, anything else by json."""
    t = type(v)
    if t is int:
        return str(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is float and math.isfinite(v):
        return repr(v)
    if t is str and v.isascii() and v.isprintable() and '"' not in v and "\\" not in v:
        return f'"{v}"'
    return _json(v)


def _fixed_parts(over: dict) -> tuple[str, str, str]:
    """The header's parts that are the same for every writer of this process (cached while torch's version and
    argv stay as they were); ``over``: fields of them an extra replaces (then made anew, not cached)."""
    torch_version = getattr(sys.modules.get("torch"), "__version__", None)
    key = (torch_version, tuple(sys.argv[:16]))
    got = None if over else _CACHE.get(key)
    if got is None:
        f = {"format": "lotus-trace", "version": S.FORMAT_VERSION, "hostname": socket.gethostname(),
             "boot_id": boot_id(), "clock": "monotonic", "lotus_version": __version__, "torch_version": torch_version,
             "argv": list(sys.argv[:16]), "builtin_events": {e.id: e.name for e in S.BUILTIN_EVENTS}, **over}
        got = (f'"format":{_value(f["format"])},"version":{_value(f["version"])},"role":',
               f',"hostname":{_json(f["hostname"])},"boot_id":{_json(f["boot_id"])},"anchor_wall_ns":',
               f',"clock":{_json(f["clock"])},"lotus_version":{_json(f["lotus_version"])},'
               f'"torch_version":{_json(f["torch_version"])},"argv":{_json(f["argv"])},'
               f'"builtin_events":{_json(f["builtin_events"])}')
        if not over:
            _CACHE.clear()
            _CACHE[key] = got
    return got


def header_json(role: str, pid: int, rank: int, world_size: int, worker_id: int, wall_ns: int, mono_ns: int,
                extra: dict | None) -> str:
    """The header's JSON: the process's cached parts, the writer's fields, then ``extra``. An extra field named
    as one of the header's own replaces its value in place, as ``dict.update`` would (tests write files "of
    another host" so)."""
    own = {"role": role, "pid": pid, "rank": rank, "world_size": world_size, "worker_id": worker_id,
           "anchor_wall_ns": wall_ns, "anchor_mono_ns": mono_ns}
    over, tail = {}, ""
    for k, v in (extra or {}).items():
        if k in own:
            own[k] = v
        elif k in KEYS:
            over[k] = v
        else:
            tail += f",{_value(str(k))}:{_value(v)}"
    a, b, c = _fixed_parts(over)
    v = {k: _value(x) for k, x in own.items()}
    return (f'{{{a}{v["role"]},"pid":{v["pid"]},"rank":{v["rank"]},"world_size":{v["world_size"]},'
            f'"worker_id":{v["worker_id"]}{b}{v["anchor_wall_ns"]},"anchor_mono_ns":{v["anchor_mono_ns"]}{c}{tail}}}')


__all__ = ["KEYS", "boot_id", "header_json"]
