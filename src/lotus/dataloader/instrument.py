"""Timing per-sample loads, every transform of a pipeline, and collation, without touching user code.

Transforms are found on the dataset (and on datasets it wraps: ``Subset.dataset``,
``ConcatDataset.datasets``) under the attributes ``transform``, ``target_transform`` and
``transforms`` (torchvision's convention). A torchvision ``Compose`` (v1 or v2) is copied with each of
its ops wrapped, so the Compose's own logic still runs; any other callable is timed as one op.
The user's transform objects are never modified.

* In a worker process the worker's own copy of the dataset is instrumented in place
  (:func:`instrument_in_worker`): its class becomes a same-named subclass that times ``__getitem__`` /
  ``__iter__``, so ``get_worker_info().dataset`` and ``isinstance`` checks keep working.
* In the main process (num_workers=0) the user's dataset is left alone: the fetcher gets a
  :class:`SampleProxy`, and traced transforms are swapped in only while a batch is fetched
  (:class:`TransformSwap`).

Load time of a sample = from the start of ``__getitem__`` to the start of its first transform.
"""

from __future__ import annotations

import copy
import functools
import struct
import types
from collections.abc import Iterator

from lotus.dataloader.recorder import Recorder, mono
from lotus.trace import schema as S

TRANSFORM_ATTRS = ("transform", "target_transform", "transforms")
_PACK2 = struct.Struct("<" + S.RECORD.format.lstrip("<") * 2).pack  # two records in one append
_PACK3 = struct.Struct("<" + S.RECORD.format.lstrip("<") * 3).pack
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
        seen: dict[str, int] = {}
        ops = []
        for op in t.transforms:
            name = op_name(op)
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name}#{seen[name]}"
            ops.append(TimedOp(op, name, rec))
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


# -- per-sample timing ------------------------------------------------------------------------
def _index_of(idx) -> int:
    if type(idx) is int:
        return idx
    try:
        return idx.__index__()  # numpy integers, 0-d tensors
    except Exception:
        return S.NO_ID


def _timed_item(rec: Recorder, get, arg, sample: int):
    """Call ``get(arg)`` (one dataset item) and record its sample, load and transform events."""
    if not rec.on:
        return get(arg)
    rec.sample = sample
    rec.tf_start = rec.tf_end = 0
    rec.in_sample = True
    itt = rec.itt
    if itt is not None:
        itt.begin(rec.h_load)
    t0 = mono()
    try:
        item = get(arg)
    except BaseException:  # the user's error (or StopIteration): close our ITT task, re-raise as is
        rec.in_sample = False
        if itt is not None and not rec.tf_start:
            itt.end()
        raise
    t1 = mono()
    rec.in_sample = False
    try:
        w = rec.w
        lo, ep, b = rec.loader, rec.epoch, rec.batch
        tf0 = rec.tf_start
        if tf0:
            w.buf += _PACK3(S.EV_LOAD, lo, ep, t0, tf0 - t0, b, sample, 0,
                            S.EV_TRANSFORM, lo, ep, tf0, rec.tf_end - tf0, b, sample, 0,
                            S.EV_SAMPLE, lo, ep, t0, t1 - t0, b, sample, 0)
        else:
            if itt is not None:
                itt.end()
            w.buf += _PACK2(S.EV_LOAD, lo, ep, t0, t1 - t0, b, sample, 0,
                            S.EV_SAMPLE, lo, ep, t0, t1 - t0, b, sample, 0)
        rec.sample = S.NO_ID
    except Exception as exc:
        rec.fail("sample", exc)
    return item


class _TimedIterator:
    """Iterator of an IterableDataset: each next() is a sample (index = position in this stream)."""

    __slots__ = ("count", "it", "rec")

    def __init__(self, it, rec: Recorder):
        self.it = it
        self.rec = rec
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        n = self.count
        self.count = n + 1
        return _timed_item(self.rec, next, self.it, n)


def _uses_plain_getitems(cls) -> bool:
    """True when ``cls.__getitems__`` is torch's Subset one, which equals per-item indexing."""
    from torch.utils.data import Subset

    return getattr(cls, "__getitems__", None) is Subset.__getitems__


_traced_classes: dict[tuple[type, int], type] = {}


def _traced_subclass(cls: type, rec: Recorder, iterable: bool) -> type:
    key = (cls, id(rec))
    sub = _traced_classes.get(key)
    if sub is not None:
        return sub
    ns: dict = {"__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "_lotus_rec": rec}
    if iterable:
        def __iter__(self) -> Iterator:
            return _TimedIterator(super(sub, self).__iter__(), rec)

        ns["__iter__"] = __iter__
    else:
        def __getitem__(self, idx):
            return _timed_item(rec, super(sub, self).__getitem__, idx, _index_of(idx))

        ns["__getitem__"] = __getitem__
        if _uses_plain_getitems(cls):
            def __getitems__(self, indices):
                return [self[i] for i in indices]

            ns["__getitems__"] = __getitems__
    sub = type(cls)(cls.__name__, (cls,), ns)
    _traced_classes[key] = sub
    return sub


def instrument_in_worker(ds, rec: Recorder, iterable: bool) -> bool:
    """Instrument a worker's private copy of the dataset in place. Returns True if samples are timed."""
    for holder, attr, t, _ in transform_slots(ds):
        try:
            setattr(holder, attr, trace_transform(t, rec))
        except Exception:
            pass  # read-only attribute: that transform stays untimed
    if not iterable and getattr(type(ds), "__getitems__", None) is not None and not _uses_plain_getitems(type(ds)):
        return False  # batched custom __getitems__: no per-sample boundary to time
    try:
        ds.__class__ = _traced_subclass(type(ds), rec, iterable)
        return True
    except TypeError:  # C-implemented or incompatible layout
        return False


class SampleProxy:
    """What the main-process fetcher sees instead of the dataset (num_workers=0): times each item."""

    def __init__(self, ds, rec: Recorder, iterable: bool):
        self._ds = ds
        self._rec = rec
        self._iterable = iterable
        cls = type(ds)
        if not iterable and getattr(cls, "__getitems__", None) is not None:
            # Torch's fetcher prefers __getitems__: keep that path unless it is plain per-item indexing.
            self.__getitems__ = self._per_item if _uses_plain_getitems(cls) else ds.__getitems__

    def __getitem__(self, idx):
        return _timed_item(self._rec, self._ds.__getitem__, idx, _index_of(idx))

    def _per_item(self, indices):
        return [self[i] for i in indices]

    def __iter__(self):
        return _TimedIterator(iter(self._ds), self._rec)

    def __len__(self):
        return len(self._ds)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_ds", "_rec", "_iterable"):
            raise AttributeError(name)
        return getattr(self._ds, name)


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


class TimedCollate:
    """collate_fn wrapper: times collation; wraps the batch for pin timing when pinning is on."""

    __slots__ = ("envelope", "fn", "rec")

    def __init__(self, fn, rec: Recorder, envelope: bool):
        self.fn = fn
        self.rec = rec
        self.envelope = envelope

    def __call__(self, data):
        rec = self.rec
        if not rec.on:
            return self.fn(data)
        itt = rec.itt
        if itt is not None:
            itt.begin(rec.h_collate)
        t0 = mono()
        try:
            out = self.fn(data)
        finally:
            if itt is not None:
                itt.end()
        t1 = mono()
        try:
            n = len(data) if isinstance(data, list) else -1
            rec.rec(S.EV_COLLATE, t0, t1 - t0, rec.batch, S.NO_ID, n)
        except Exception as exc:
            rec.fail("collate", exc)
        if self.envelope:
            from lotus.dataloader.envelope import PinEnvelope

            return PinEnvelope(out)
        return out

    def __getattr__(self, name):
        return _delegate(self, name, "fn")
