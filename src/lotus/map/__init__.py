"""lotus.map: LotusMap (Python ops -> native functions) and hardware metrics per Python op.

Readers return pandas DataFrames; pandas and numpy are imported on first use::

    from lotus.map import read_vtune_uarch, read_vtune_hotspots, read_uprof, read_vtune_summary
    from lotus.map import import_mapping, load_mapping, map_run, attribute_hw

See docs/lotusmap.md and docs/hw.md.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""

from __future__ import annotations

_LAZY = {
    "read_vtune_uarch": "lotus.map.vtune",
    "read_vtune_hotspots": "lotus.map.vtune",
    "read_vtune_summary": "lotus.map.vtune",
    "read_uprof": "lotus.map.uprof",
    "build_mapping": "lotus.map.mapping",
    "import_profiles": "lotus.map.mapping",
    "import_mapping": "lotus.map.mapping",
    "load_mapping": "lotus.map.mapping",
    "save_mapping": "lotus.map.mapping",
    "func_key": "lotus.map.mapping",
    "split_key": "lotus.map.mapping",
    "map_run": "lotus.map.run",
    "ToolError": "lotus.map.backends",
    "read_collapsed": "lotus.map.pyspy",
    "attribute_pyspy": "lotus.map.pyspy",
    "traced_op_seconds": "lotus.map.hw",
    "read_uarch_dir": "lotus.map.hw",
    "attribute_hw": "lotus.map.hw",
    "op_metrics": "lotus.map.hw",
    "hw_tables": "lotus.map.hw",
}
_RENAMED = {"attribute_pyspy": "attribute"}

__all__ = list(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lotus.map' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), _RENAMED.get(name, name))
