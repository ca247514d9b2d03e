"""lotus.profile: what a job needs, measured by probes through lotus.launch and completed by lotus.model.

* :mod:`.stalls`: compute / prep stall / fetch stall split (DS-Analyzer's differential analysis)
* :mod:`.pagecache`: evict, warm and measure the page cache of a dataset's files (no root)
"""
