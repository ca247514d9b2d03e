"""Timing transforms that are not a torchvision ``Compose`` (those are timed by :mod:`.compose`).

A dataset's ``transform``/``target_transform``/``transforms`` attribute (torchvision's convention;
instance or class attribute; also on datasets it wraps: ``Subset.dataset``, ``ConcatDataset.datasets``)
that is a plain callable (a function, ``ToTensor()`` alone, a user class) is timed as one op by a
:class:`TimedPipeline` around a :class:`TimedOp`, in the worker's own copy of the dataset or, in the
main process (num_workers=0), swapped in only while a batch is fetched (:class:`TransformSwap`). A
``Compose`` there, or a ``StandardTransform`` around one, is left as it is: the class-level timing of
:mod:`.compose` covers it wherever it lives. User objects are never modified.
"""

from __future__ import annotations

import copy
import sys
import types

from lotus.dataloader.opnames import op_name
from lotus.dataloader.recorder import Recorder, mono

TRANSFORM_ATTRS = ("transform", "target_transform", "transforms")
_MAX_DEPTH = 4


def _delegate(self, name: str, target: str):
    # __getattr__ helper: never recurse while an instance is half-built (copy, pickle).
    if name.startswith("__") or name in type(self).__slots__:
        raise AttributeError(name)
    return getattr(object.__getattribute__(self, target), name)


def _is_compose(t) -> bool:
    """A torchvision Compose (v1 or v2), without importing torchvision (imported if ``t`` is one)."""
    mod = sys.modules
    classes = [getattr(mod.get(m), "Compose", None) for m in
               ("torchvision.transforms.transforms", "torchvision.transforms.v2._container")]
    classes = tuple(c for c in classes if c is not None)
    return bool(classes) and isinstance(t, classes) and isinstance(getattr(t, "transforms", None), (list, tuple))


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
        if not rec.detail:
            return self.op(*args, **kwargs)
        itt = rec.itt
        n0 = rec.nrec
        if itt is not None:
            itt.begin(self.handle)
        t0 = mono()
        try:
            out = self.op(*args, **kwargs)
        finally:
            if itt is not None:
                itt.end()
        t1 = mono()
        if rec.nrec == n0:  # ops inside it (a Compose it calls) recorded nothing: the time is its own
            try:
                w = rec.w
                w.buf += w.pack(self.nid, rec.loader, rec.epoch, t0, t1 - t0, rec.batch, rec.sample, 0)
                rec.nrec = n0 + 1
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
        if not rec.detail:
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


def needs_wrapping(t) -> bool:
    """Whether transform ``t`` needs an attribute-level stand-in (Composes are timed at the class level)."""
    if t is None or not callable(t) or isinstance(t, TimedPipeline) or _is_compose(t):
        return False
    if type(t).__name__ == "StandardTransform":
        return any(needs_wrapping(v) for a, v in _vars(t).items() if a in ("transform", "target_transform"))
    return True


def trace_transform(t, rec: Recorder):
    """A traced stand-in for transform ``t`` (``t`` itself is not modified); ``t`` when none is needed."""
    if not needs_wrapping(t):
        return t
    if type(t).__name__ == "StandardTransform":
        c = copy.copy(t)
        for a, v in _vars(t).items():
            if a in ("transform", "target_transform") and callable(v):
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
    """Installs traced stand-ins of a dataset's non-Compose transforms only while a batch is fetched
    (main process, num_workers=0), and opens the Compose timing window for the same time.

    The dataset is searched once, when the iterator starts (each epoch); a transform the user replaced
    since then is left alone.
    """

    def __init__(self, ds, rec: Recorder):
        from lotus.dataloader.compose import ComposeWindow

        self.rec = rec
        self._window = ComposeWindow(rec)
        self._plan = [(holder, attr, t, from_class, trace_transform(t, rec))
                      for holder, attr, t, from_class in transform_slots(ds) if needs_wrapping(t)]
        self._active: list[tuple[object, str, object, bool]] = []

    def __enter__(self):
        self._window.__enter__()
        if not self._plan:
            return self
        active = []
        for holder, attr, t, from_class, traced in self._plan:
            try:
                if getattr(holder, attr, None) is not t:
                    continue  # replaced by the user meanwhile: not ours to wrap
                _set(holder, attr, traced)
                active.append((holder, attr, t, from_class))
            except Exception:
                pass
        self._active = active
        return self

    def __exit__(self, *exc) -> None:
        try:
            for holder, attr, t, from_class in reversed(self._active):
                try:
                    if from_class:
                        object.__delattr__(holder, attr)  # the class attribute shows through again
                    else:
                        _set(holder, attr, t)
                except Exception:
                    pass
            self._active = []
        finally:
            self._window.__exit__()


def _set(holder, attr: str, value) -> None:
    if _is_module(holder):
        object.__setattr__(holder, attr, value)  # not registered as a submodule
    else:
        setattr(holder, attr, value)


def _is_module(obj) -> bool:
    return hasattr(obj, "_modules") and hasattr(obj, "_parameters")
