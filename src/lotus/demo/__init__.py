"""The demo: a generated JPEG image-folder dataset and a short training run traced by lotus.

Feature layer (docs/architecture.md): may import :mod:`lotus.model`, :mod:`lotus.analysis`, the engine
(:mod:`lotus.query` itself), the format, the tracing side and other feature packages (no cycle);
never the commands.
"""
