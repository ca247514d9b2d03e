"""Timing every transform of a dataset's pipeline without modifying the user's objects.

Transforms are found on the dataset (and on datasets it wraps: ``Subset.dataset``,
``ConcatDataset.datasets``) under the attributes ``transform``, ``target_transform`` and
``transforms`` (torchvision's convention; instance or class attributes). A torchvision ``Compose``
(v1 or v2) is copied with each of its ops wrapped in a :class:`TimedOp`, so the Compose's own logic
still runs; any other callable is timed as one op. :class:`TransformSwap` installs the traced versions
only while a batch is fetched, for the main process (num_workers=0).
"""

from __future__ import annotations

import copy
import functools
import types

from lotus._names import dedupe
from lotus.dataloader.recorder import Recorder, mono

TRANSFORM_ATTRS = ("transform", "target_transform", "transforms")
_MAX_DEPTH = 4


def op_name(fn) -> str:
    """A readable op name: the class of a transform object, the name of a function."""
    if isinstance(fn, functools.partial):
        return op_name(fn.func)
    if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return fn.__name__
    return type(fn).__name__


def _delegate(self, name: str, target: str):
    # __getattr__ helper: never recurse while an instance is half-built (copy, pickle).
    if name.startswith("__") or name in type(self).__slots__:
        raise AttributeError(name)
    return getattr(object.__getattribute__(self, target), name)


def _is_compose(t) -> bool:
    try:
        from torchvision.transforms import Compose
        from torchvision.transforms.v2 import Compose as ComposeV2
    except Exception:  # torchvision missing or broken: time such objects as one op
        return False
    return isinstance(t, (Compose, ComposeV2)) and isinstance(getattr(t, "transforms", None), (list, tuple))


class TimedOp:
    """One op of a pipeline: times each call and opens an ITT task named after the op."""

    __slots__ = ("handle", "name", "nid", "op", "rec")

    def __init__(self, op, name: str, rec: Recorder):
        self.op = op
        self.name = name
        self.rec = rec
        self.nid = rec.name_id(name)
        self.handle = rec.itt.handle(name) if rec.itt is not None else None

    def __call__(self, *args, **kwargs):
        rec = self.rec
        itt = rec.itt
        if itt is None and rec.on:  # the hot path: two clock reads and one 48-byte append
            t0 = mono()
            out = self.op(*args, **kwargs)
            t1 = mono()
            try:
                w = rec.w
                w.buf += w.pack(self.nid, rec.loader, rec.epoch, t0, t1 - t0, rec.batch, rec.sample, 0)
            except Exception as exc:
                rec.fail("op", exc)
            return out
        if not rec.on:
            return self.op(*args, **kwargs)
        itt.begin(self.handle)
        t0 = mono()
        try:
            out = self.op(*args, **kwargs)
        finally:
            itt.end()
        t1 = mono()
        try:
            rec.rec(self.nid, t0, t1 - t0, rec.batch, rec.sample, 0)
        except Exception as exc:
            rec.fail("op", exc)
        return out

    def __getattr__(self, name):  # parameters of the wrapped transform stay readable
        return _delegate(self, name, "op")

    def __repr__(self) -> str:
        return repr(self.op)


class TimedPipeline:
    """A dataset's transform attribute: marks the span of the sample's transforms."""

    __slots__ = ("inner", "original", "rec")

    def __init__(self, inner, original, rec: Recorder):
        self.inner = inner  # the Compose copy with TimedOps, or a TimedOp
        self.original = original
        self.rec = rec

    def __call__(self, *args, **kwargs):
        rec = self.rec
        if not rec.on:
            return self.inner(*args, **kwargs)
        t0 = mono()
        if rec.tf_start == 0:
            rec.tf_start = t0
            if rec.itt is not None and rec.in_sample:
                rec.itt.end()  # the sample's Loader task ends where its first transform begins
        out = self.inner(*args, **kwargs)
        rec.tf_end = mono()
        return out

    def __getattr__(self, name):
        return _delegate(self, name, "original")

    def __repr__(self) -> str:
        return repr(self.original)


def trace_transform(t, rec: Recorder):
    """A traced stand-in for transform ``t`` (``t`` itself is not modified)."""
    if isinstance(t, TimedPipeline) or t is None or not callable(t):
        return t
    if _is_compose(t):
        names = dedupe([op_name(op) for op in t.transforms], "#")  # two Normalize: Normalize, Normalize#2
        ops = [TimedOp(op, name, rec) for op, name in zip(t.transforms, names, strict=True)]
        c = copy.copy(t)
        object.__setattr__(c, "transforms", ops)  # bypasses nn.Module.__setattr__ (v2 Compose)
        return TimedPipeline(c, t, rec)
    inner_slots = {a: v for a, v in _vars(t).items() if a in ("transform", "target_transform") and callable(v)}
    if inner_slots and type(t).__name__ == "StandardTransform":
        c = copy.copy(t)
        for a, v in inner_slots.items():
            object.__setattr__(c, a, trace_transform(v, rec))
        return c
    return TimedPipeline(TimedOp(t, op_name(t), rec), t, rec)


def _vars(obj) -> dict:
    try:
        return vars(obj)
    except TypeError:
        return {}


def _class_transform(ds, attr: str):
    """A transform object set as a class attribute (``transform = Compose(...)`` in the class body)."""
    v = getattr(type(ds), attr, None)
    if v is None or not callable(v) or isinstance(v, (types.FunctionType, types.MethodType, type, property)):
        return None
    return v


def transform_slots(ds, depth: int = 0, seen: set | None = None) -> list[tuple[object, str, object, bool]]:
    """(holder, attribute, transform, from_class) for every transform found on ``ds`` and the
    datasets it wraps; ``from_class`` when the transform is a class attribute of the holder."""
    seen = set() if seen is None else seen
    if depth > _MAX_DEPTH or id(ds) in seen:
        return []
    seen.add(id(ds))
    d = _vars(ds)
    slots = []
    for a in TRANSFORM_ATTRS:
        if a in d:
            if callable(d[a]):
                slots.append((ds, a, d[a], False))
        else:
            v = _class_transform(ds, a)
            if v is not None:
                slots.append((ds, a, v, True))
    inner = d.get("dataset")
    if inner is not None and (hasattr(inner, "__getitem__") or hasattr(inner, "__iter__")):
        slots += transform_slots(inner, depth + 1, seen)
    for sub in d.get("datasets", None) or ():
        slots += transform_slots(sub, depth + 1, seen)
    return slots


class TransformSwap:
    """Installs traced transforms on the user's dataset only while a batch is fetched (main process)."""

    def __init__(self, ds, rec: Recorder):
        self.ds = ds
        self.rec = rec
        self._cache: dict[int, tuple[object, object]] = {}
        self._active: list[tuple[object, str, object, bool]] = []

    def __enter__(self):
        active = []
        for holder, attr, t, from_class in transform_slots(self.ds):
            cached = self._cache.get(id(t))
            if cached is None or cached[0] is not t:
                cached = (t, trace_transform(t, self.rec))
                self._cache[id(t)] = cached
            try:
                _set(holder, attr, cached[1])
                active.append((holder, attr, t, from_class))
            except Exception:
                pass
        self._active = active
        return self

    def __exit__(self, *exc) -> None:
        for holder, attr, t, from_class in reversed(self._active):
            try:
                if from_class:
                    object.__delattr__(holder, attr)  # the class attribute shows through again
                else:
                    _set(holder, attr, t)
            except Exception:
                pass
        self._active = []


def _set(holder, attr: str, value) -> None:
    if _is_module(holder):
        object.__setattr__(holder, attr, value)  # not registered as a submodule
    else:
        setattr(holder, attr, value)


def _is_module(obj) -> bool:
    return hasattr(obj, "_modules") and hasattr(obj, "_parameters")
