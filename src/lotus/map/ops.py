"""The ops LotusMap runs in isolation: the image-classification pipeline, or the transforms of a user's Compose.

The chain is always ``Loader`` (open a JPEG with PIL and convert it to RGB, as torchvision's
``ImageFolder`` does) -> the transforms, in order -> ``Collation`` (``default_collate`` of a batch of
the last output). Each op is measured on the output of the op before it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lotus.errors import InputError

DEFAULT_OPS = ("Loader", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize", "Collation")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class Op:
    name: str
    fn: Callable[[Any], Any]


def default_image() -> Path:
    """A real photo shipped with lotus (600x400 JPEG, close to an ImageNet image)."""
    here = Path(__file__).resolve().parent.parent / "demo" / "photos"
    for name in ("coffee.jpg", "chelsea.jpg"):
        if (here / name).exists():
            return here / name
    photos = sorted(here.glob("*.jpg")) if here.exists() else []
    if photos:
        return photos[0]
    raise InputError("no default image: lotus/demo/photos/*.jpg is missing; pass --image FILE", here)


def pil_loader(path: str) -> Any:
    from PIL import Image

    with open(path, "rb") as fh:
        img = Image.open(fh)
        return img.convert("RGB")


def default_transforms() -> list:
    """The study's training transforms; the flip has p=1 so that its native code runs on every call."""
    import torchvision.transforms as T

    return [
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(p=1.0),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]


def load_object(spec: str) -> Any:
    """``package.module:attr.path`` or ``path/to/file.py:attr`` -> the object."""
    if ":" not in spec:
        raise InputError(f"--pipeline must be MODULE:OBJECT (e.g. mypkg.data:train_transform), not {spec!r}")
    mod_name, _, attr = spec.rpartition(":")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            path = Path(mod_name)
            if not path.exists():
                raise InputError("no such file", path)
            mspec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(mspec)
            sys.modules.setdefault(path.stem, module)
            mspec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(mod_name)
    except InputError:
        raise
    except ImportError as exc:
        raise InputError(f"cannot import {mod_name!r} for --pipeline: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{mod_name!r} has no attribute {attr!r} (from --pipeline {spec})")
        obj = getattr(obj, part)
    return obj


def transforms_of(obj: Any) -> list:
    """The transforms of a Compose (``.transforms``), a list/tuple of callables, or one callable."""
    if hasattr(obj, "transforms") and isinstance(obj.transforms, (list, tuple)):
        return list(obj.transforms)
    if isinstance(obj, (list, tuple)):
        items = list(obj)
    elif callable(obj):
        items = [obj]
    else:
        raise InputError(f"--pipeline object is a {type(obj).__name__}: "
                         "expected a Compose, a list of transforms or a callable")
    bad = [type(t).__name__ for t in items if not callable(t)]
    if bad:
        raise InputError(f"--pipeline holds non-callable items: {', '.join(bad)}")
    return items


def op_name(t: Any) -> str:
    name = getattr(t, "__name__", None) if not hasattr(t, "forward") else None
    name = name or type(t).__name__
    return re.sub(r"[^0-9A-Za-z_.#-]+", "_", name).strip("_") or "op"


def build_ops(pipeline: str | None = None, batch_size: int = 128) -> list[Op]:
    """Loader, the transforms (default: :func:`default_transforms`), Collation."""
    transforms = default_transforms() if pipeline is None else transforms_of(load_object(pipeline))
    ops = [Op("Loader", pil_loader)]
    seen: dict[str, int] = {"Loader": 1, "Collation": 1}
    for t in transforms:
        name = op_name(t)
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 1
        ops.append(Op(name, t))
    ops.append(Op("Collation", _collate(batch_size)))
    return ops


def _collate(batch_size: int) -> Callable[[Any], Any]:
    """``default_collate`` of ``batch_size`` distinct copies of one sample (copies made once)."""
    cache: dict[int, list] = {}

    def collation(sample: Any) -> Any:
        from torch.utils.data import default_collate

        batch = cache.get(id(sample))
        if batch is None:
            batch = [_copy(sample) for _ in range(batch_size)]
            cache.clear()
            cache[id(sample)] = batch
        return default_collate(batch)

    return collation


def _copy(x: Any) -> Any:
    if hasattr(x, "clone"):
        return x.clone()
    if hasattr(x, "copy"):
        return x.copy()
    return x
