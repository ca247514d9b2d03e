"""The isolation workload of ``lotus map run``: ``python -m lotus.map._workload SPEC.json``.

1. Build the op chain (:mod:`lotus.map.ops`) and warm every op up, computing each op's input.
2. Dump ``/proc/self/maps`` (to name native addresses later) and write the ready file.
3. Wait for the go file (the profiler is attached), run a short settle phase.
4. For each run and each selected op, call the op in a loop for ``seconds`` inside two marker
   functions, ``_lotus_run<r>`` and ``_lotus_op__<Op>``, renamed code objects so that a sampling
   profiler's stacks say which op ran. With ``mode="itt"`` VTune collection is resumed, an ITT task
   named after the op spans the loop, and collection is paused again; ``mode="uprof"`` does the same
   with AMD's profile-control library.
5. Write the result JSON: per op and run the calls and elapsed ns, and errors of ops that raised.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import types
from pathlib import Path


def marker_name(prefix: str, name: str) -> str:
    import re

    return prefix + re.sub(r"[^0-9A-Za-z_#.-]", "_", name)


def _op_loop(fn, arg, seconds, min_calls):
    calls = 0
    t0 = time.perf_counter_ns()
    deadline = t0 + int(seconds * 1e9)
    while calls < min_calls or time.perf_counter_ns() < deadline:
        fn(arg)
        calls += 1
    return calls, time.perf_counter_ns() - t0


def _run_body(body):
    return body()


def named(template, name: str):
    """A copy of ``template`` whose frames are called ``name`` (what py-spy and VTune show)."""
    code = template.__code__
    kw = {"co_name": name}
    if sys.version_info >= (3, 11):
        kw["co_qualname"] = name
    return types.FunctionType(code.replace(**kw), template.__globals__, name)


class _Collector:
    """Resume/pause of the collecting profiler around each measured op (no-op for py-spy)."""

    def __init__(self, mode: str, uprof_lib: str | None = None):
        self.mode = mode
        self._itt = None
        self._uprof = None
        if mode == "itt":
            import ittapi.native as itt

            self._itt = itt
            self._domain = itt.Domain("lotus.map")
            self._handles: dict[str, object] = {}
        elif mode == "uprof" and uprof_lib:
            import ctypes

            lib = ctypes.CDLL(uprof_lib)
            resume = getattr(lib, "amdProfileResumeImpl", None) or lib.amdProfileResume
            pause = getattr(lib, "amdProfilePauseImpl", None) or lib.amdProfilePause
            self._uprof = (resume, pause)

    def begin(self, op: str) -> None:
        if self._itt is not None:
            handle = self._handles.get(op) or self._handles.setdefault(op, self._itt.StringHandle(op))
            self._itt.resume()
            self._itt.task_begin(self._domain, handle)
        elif self._uprof is not None:
            self._uprof[0](1)  # AMD_PROFILE_CPU

    def end(self) -> None:
        if self._itt is not None:
            self._itt.task_end(self._domain)
            self._itt.pause()
        elif self._uprof is not None:
            self._uprof[1](1)


def _error(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def run(spec: dict) -> int:
    result: dict = {"pid": os.getpid(), "ops": {}, "errors": {}, "markers": {}, "order": []}
    result_file = spec["result_file"]
    try:
        import torch

        torch.set_num_threads(int(spec.get("threads", 1)))
        from lotus.map.ops import build_ops, default_image

        ops = build_ops(spec.get("pipeline"), int(spec.get("batch_size", 128)))
    except Exception as exc:
        result["fatal"] = _error(exc)
        _write_json(result_file, result)
        return 2
    image = spec.get("image") or str(default_image())
    wanted = spec.get("ops")
    known = [op.name for op in ops]
    result["available"] = known
    if spec.get("list_only"):
        _write_json(result_file, result)
        return 0
    if wanted:
        unknown = [w for w in wanted if w not in known]
        if unknown:
            result["fatal"] = f"unknown op(s) {unknown}; this pipeline has: {', '.join(known)}"
            _write_json(result_file, result)
            return 2
    # Warm up along the chain; an op that raises is reported and skipped (its input flows on).
    inputs: dict[str, object] = {}
    x: object = image
    warm = max(1, int(spec.get("warmup_calls", 3)))
    for op in ops:
        inputs[op.name] = x
        try:
            out = None
            for _ in range(warm):
                out = op.fn(x)
            x = out
        except Exception as exc:
            result["errors"][op.name] = _error(exc)
    # Errors of ops that were not asked for are kept apart: they only mean that their input flowed on.
    result["chain_errors"] = {k: v for k, v in result["errors"].items() if wanted and k not in wanted}
    result["errors"] = {k: v for k, v in result["errors"].items() if k not in result["chain_errors"]}
    selected = [op for op in ops if (not wanted or op.name in wanted) and op.name not in result["errors"]]
    result["order"] = [op.name for op in ops if not wanted or op.name in wanted]
    loops = {op.name: named(_op_loop, marker_name("_lotus_op__", op.name)) for op in selected}
    result["markers"] = {f.__name__: name for name, f in loops.items()}
    collector = _Collector(spec.get("mode", "none"), spec.get("uprof_lib"))

    if spec.get("maps_file"):
        try:
            Path(spec["maps_file"]).write_text(Path("/proc/self/maps").read_text())
        except OSError:
            pass
    if spec.get("ready_file"):
        _write_json(spec["ready_file"], {"pid": os.getpid()})
    if spec.get("go_file"):
        deadline = time.monotonic() + float(spec.get("go_timeout_s", 120))
        while not os.path.exists(spec["go_file"]):
            if time.monotonic() > deadline:
                result["fatal"] = "the profiler did not start (no go signal)"
                _write_json(result_file, result)
                return 3
            time.sleep(0.01)
    settle_end = time.monotonic() + float(spec.get("settle_s", 0.0))
    while selected and time.monotonic() < settle_end:
        for op in selected:
            op.fn(inputs[op.name])

    seconds = float(spec.get("seconds", 1.0))
    min_calls = int(spec.get("min_calls", 1))
    for r in range(int(spec.get("runs", 1))):

        def measure_ops(r=r):
            for op in selected:
                if op.name in result["errors"]:
                    continue
                collector.begin(op.name)
                try:
                    calls, ns = loops[op.name](op.fn, inputs[op.name], seconds, min_calls)
                except Exception as exc:
                    result["errors"][op.name] = _error(exc)
                    continue
                finally:
                    collector.end()
                entry = result["ops"].setdefault(op.name, {"calls": [], "elapsed_ns": [], "runs": []})
                entry["calls"].append(calls)
                entry["elapsed_ns"].append(ns)
                entry["runs"].append(str(r))

        named(_run_body, f"_lotus_run{r}")(measure_ops)
    _write_json(result_file, result)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m lotus.map._workload SPEC.json\n")
        return 2
    spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
