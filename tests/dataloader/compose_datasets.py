"""Datasets keeping their torchvision Composes where lotus cannot see them by attribute name.

Module level, so spawn/forkserver workers import them. Every item is a small float tensor; the ops are
deterministic so traced and untraced loaders give identical batches.
"""

from __future__ import annotations

import functools

import torch
from torch.utils.data import Dataset
from torchvision import transforms as T
from torchvision.transforms import v2


def double(x):
    return x * 2


def plus_one(x):
    return x + 1


def _item(i: int) -> torch.Tensor:
    return torch.arange(16, dtype=torch.float32).reshape(1, 4, 4) + i


def pipeline():
    return T.Compose([T.Normalize([0.5], [0.25]), double, plus_one])


PIPELINE_OPS = ["Normalize", "double", "plus_one"]


class AttrDS(Dataset):
    """``self.aug``: any attribute name."""

    def __init__(self, n: int = 12):
        self.n = n
        self.aug = pipeline()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.aug(_item(i)), i


class DictDS(Dataset):
    """A Compose in a dict of pipelines."""

    def __init__(self, n: int = 12):
        self.n = n
        self.pipes = {"image": pipeline(), "label": None}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.pipes["image"](_item(i)), i


def _apply(compose, x):
    return compose(x)


class PartialDS(Dataset):
    """A Compose bound into a functools.partial (a closure that pickles)."""

    def __init__(self, n: int = 12):
        self.n = n
        self.fn = functools.partial(_apply, pipeline())

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.fn(_item(i)), i


class WrapperDS(Dataset):
    """A wrapping dataset calling the inner one's ``__getitem__``, then its own Compose."""

    def __init__(self, n: int = 12):
        self.inner = AttrDS(n)
        self.post = T.Compose([T.Lambda(torch.flatten)])

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return self.post(x), y


class HFStyleDS(Dataset):
    """HF datasets' ``set_transform``/``with_transform``: a function over a dict of columns."""

    def __init__(self, n: int = 12):
        self.n = n
        self._format_transform = None

    def set_transform(self, fn) -> None:
        self._format_transform = fn

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        row = {"pixel_values": [_item(i)], "label": [i]}
        if self._format_transform is not None:
            row = self._format_transform(row)
        return row["pixel_values"][0], row["label"][0]


class HFTransform:
    """What an HF user passes to set_transform: applies a Compose to every image of the batch."""

    def __init__(self):
        self.compose = pipeline()

    def __call__(self, batch):
        batch["pixel_values"] = [self.compose(img) for img in batch["pixel_values"]]
        return batch


class NestedDS(Dataset):
    """A Compose inside a Compose, and an op that calls a Compose itself."""

    def __init__(self, n: int = 12):
        self.n = n
        inner = T.Compose([T.Normalize([0.5], [0.25]), double])
        self.transform = T.Compose([inner, CallsCompose(), plus_one])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.transform(_item(i)), i


class CallsCompose:
    """An op whose work is a Compose of its own (its time goes to the inner ops, once)."""

    def __init__(self):
        self.inner = T.Compose([plus_one, double])

    def __call__(self, x):
        return self.inner(x)


class V2PairDS(Dataset):
    """torchvision v2 Compose over an (image, mask) pair."""

    def __init__(self, n: int = 12):
        self.n = n
        self.joint = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Lambda(double)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        img, mask = self.joint(_item(i), _item(i) > 8)
        return img, mask.float()
