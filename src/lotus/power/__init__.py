"""lotus.power: GPU power and energy of inference, read-only.

    lotus power bench -m resnet50 --batch 1,8,32,128 --tenants 1,2,4 --out rn50.csv
    lotus power predict --table rn50.csv --batch 32 --tenants 2 [--clock 1410]
    lotus power plan --table rn50.csv --power-cap 250

NVML bench tables (:mod:`lotus.power.bench`, tenants started through :mod:`lotus.launch`) -> the
power/throughput predictor (:mod:`lotus.model.power`) -> a plan under a power cap
(:mod:`lotus.power.plan`). lotus never changes clocks, power limits, compute mode or MPS: the plan lists
the commands a privileged user would run. Nothing heavy is imported until used. See docs/power.md.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

_EXPORTS = {
    "BenchSpec": "lotus.power.bench", "run_bench": "lotus.power.bench",
    "run_command_bench": "lotus.power.command",
    "NvmlSampler": "lotus.power.nvml", "NoGPU": "lotus.power.nvml", "mps_status": "lotus.power.nvml",
    "make_plan": "lotus.power.plan", "format_plan": "lotus.power.plan", "Plan": "lotus.power.plan",
    "read_table": "lotus.power.table", "write_table": "lotus.power.table", "COLUMNS": "lotus.power.table",
}

__all__ = ["COLUMNS", "BenchSpec", "NoGPU", "NvmlSampler", "Plan", "format_plan", "make_plan", "mps_status",
           "read_table", "run_bench", "run_command_bench", "write_table"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.power' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
