"""The start-up hook of ``lotus run``: torch's DataLoader becomes lotus's in this process.

:func:`install` runs at interpreter start-up (from ``lotus/launch/_boot/sitecustomize.py``). It does
not import torch: a one-shot import hook waits for ``import torch`` to finish, then replaces
``torch.utils.data.DataLoader`` (and ``torch.utils.data.dataloader.DataLoader``) by
:class:`lotus.dataloader.DataLoader`, a subclass, so ``isinstance`` checks, subclasses defined by
libraries imported afterwards (Lightning, Accelerate, HF Trainer) and ``from torch.utils.data import
DataLoader`` in the user's script all get lotus's. Nothing here may raise into the user's program.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys

_log = logging.getLogger("lotus.launch")
_installed = False


def patch_torch() -> bool:
    """Make torch's DataLoader lotus's now (torch must be importable). True when patched."""
    import torch.utils.data
    import torch.utils.data.dataloader as dl

    from lotus.dataloader.loader import DataLoader, TorchDataLoader

    if torch.utils.data.DataLoader is DataLoader:
        return True
    if torch.utils.data.DataLoader is not TorchDataLoader:  # someone else patched it: leave it alone
        _log.warning("torch.utils.data.DataLoader was already replaced by %r; lotus leaves it",
                     torch.utils.data.DataLoader)
        return False
    torch.utils.data.DataLoader = DataLoader
    dl.DataLoader = DataLoader
    return True


def unpatch_torch() -> None:
    """Undo :func:`patch_torch` (tests)."""
    if "torch" not in sys.modules:
        return
    import torch.utils.data
    import torch.utils.data.dataloader as dl

    from lotus.dataloader.loader import TorchDataLoader

    torch.utils.data.DataLoader = TorchDataLoader
    dl.DataLoader = TorchDataLoader


def _safe_patch() -> None:
    try:
        patch_torch()
    except Exception as exc:
        sys.stderr.write(f"lotus run: could not install lotus's DataLoader ({exc!r}); the job runs untraced\n")


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``torch`` so the patch runs after it executes."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us again
        except ValueError:
            pass
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module):
            real_exec(module)
            _safe_patch()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Patch now if torch is already imported, else right after ``import torch`` completes."""
    global _installed
    if _installed:
        return
    _installed = True
    if "torch" in sys.modules:
        _safe_patch()
    else:
        sys.meta_path.insert(0, _AfterTorch())
