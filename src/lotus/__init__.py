"""lotus: where the time of a PyTorch input pipeline goes, and why the GPU sits idle.

Importing ``lotus`` is cheap: torch, pandas and matplotlib are imported only by the
submodules that need them (``lotus.dataloader``, ``lotus.trace``, ``lotus.analysis``...).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "step"]


def __getattr__(name: str):
    # Lazy re-exports: keep `import lotus` free of torch.
    if name == "step":
        from lotus.dataloader.gpu import step

        return step
    raise AttributeError(f"module 'lotus' has no attribute {name!r}")
