"""lotus.profile: what a job needs, measured by probes through lotus.launch and completed by lotus.model.

* :mod:`.stalls`: compute / prep stall / fetch stall split (DS-Analyzer's differential analysis)
* :mod:`.pagecache`: evict, warm and measure the page cache of a dataset's files (no root)

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""
