"""Timing per-sample loads and collation without touching user code (transforms: :mod:`.transforms`).

* In a worker process the worker's own copy of the dataset is instrumented in place
  (:func:`instrument_in_worker`): its class becomes a same-named subclass that times ``__getitem__`` /
  ``__iter__``, so ``get_worker_info().dataset`` and ``isinstance`` checks keep working.
* In the main process (num_workers=0) the user's dataset is left alone: the fetcher gets a
  :class:`SampleProxy`; Composes are timed at the class level while a batch is fetched
  (:mod:`.compose`) and other transforms swapped in only for that time (:class:`TransformSwap`).

Load time of a sample = from the start of ``__getitem__`` to the start of its first transform.
"""

from __future__ import annotations

from collections.abc import Iterator

from lotus.dataloader.recorder import Recorder, mono
from lotus.dataloader.transforms import _delegate, needs_wrapping, trace_transform, transform_slots
from lotus.trace import schema as S

_PACK2 = S.PACK2  # two records in one append (main side)
_PACK3 = S.PACK3


# -- per-sample timing ------------------------------------------------------------------------
def _index_of(idx) -> int:
    if type(idx) is int:
        return idx
    try:
        return idx.__index__()  # numpy integers, 0-d tensors
    except Exception:
        return S.NO_ID


def _timed_item(rec: Recorder, get, arg, sample: int):
    """Call ``get(arg)`` (one dataset item); in a detail batch, record its ``sample`` event (``arg`` = its
    load time, up to its first transform; -1 when no transform ran: the reader derives ``load`` and
    ``transform`` from it and the item's op events)."""
    if not rec.detail:
        return get(arg)
    rec.sample = sample
    rec.tf_start = 0
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
        if not rec.tf_start and itt is not None:
            itt.end()
        rec.end_sample(t0, t1, sample)
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


# per (class, iterable): a worker process has one recorder (its loader's), which the class holds as
# ``_lotus_rec``; made in the main process before the workers fork (:func:`prepare_in_parent`), so that a forked
# worker finds it made: creating the class in each worker cost ~0.6 ms of CPU and ~150 copy-on-write page faults
# there (a VM), before its first batch
_traced_classes: dict[tuple[type, bool], type] = {}


def _traced_subclass(cls: type, rec: Recorder, iterable: bool) -> type:
    key = (cls, iterable)
    sub = _traced_classes.get(key)
    if sub is not None:
        if sub._lotus_rec is None or sub._lotus_rec is rec:
            sub._lotus_rec = rec
            return sub
        return _make_traced(cls, rec, iterable)  # another recorder in this process (not a worker's case)
    sub = _traced_classes[key] = _make_traced(cls, rec, iterable)
    return sub


def _make_traced(cls: type, rec: Recorder | None, iterable: bool) -> type:
    ns: dict = {"__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "_lotus_rec": rec}
    if iterable:
        def __iter__(self) -> Iterator:
            return _TimedIterator(super(sub, self).__iter__(), sub._lotus_rec)

        ns["__iter__"] = __iter__
    else:
        def __getitem__(self, idx):
            return _timed_item(sub._lotus_rec, super(sub, self).__getitem__, idx, _index_of(idx))

        ns["__getitem__"] = __getitem__
        if _uses_plain_getitems(cls):
            def __getitems__(self, indices):
                return [self[i] for i in indices]

            ns["__getitems__"] = __getitems__
    sub = type(cls)(cls.__name__, (cls,), ns)
    from lotus.dataloader.traced_class import make_faithful

    make_faithful(sub, cls)  # pickles, copies and iterates as the user's class (IterDataPipe, user pickling)
    return sub


def _timed_class_wanted(cls: type, iterable: bool) -> bool:
    """Whether samples of ``cls`` get timed by a traced subclass (not a batched custom ``__getitems__``)."""
    return iterable or getattr(cls, "__getitems__", None) is None or _uses_plain_getitems(cls)


def prepare_in_parent(ds, iterable: bool) -> None:
    """In the main process, as its workers are about to fork: the traced subclass of ``ds``'s class made now
    (once per class), which each forked worker then only hands its recorder (see ``_traced_classes``)."""
    cls = type(ds)
    if (cls, iterable) not in _traced_classes and _timed_class_wanted(cls, iterable):
        _traced_classes[(cls, iterable)] = _make_traced(cls, None, iterable)


def instrument_in_worker(ds, rec: Recorder, iterable: bool) -> bool:
    """Instrument a worker's private copy of the dataset in place. Returns True if samples are timed.

    Composes anywhere are timed by the process-wide window of :mod:`.compose` (opened by the worker
    entry); other transforms found in the dataset's transform attributes get a traced stand-in."""
    for holder, attr, t, _ in transform_slots(ds):
        if not needs_wrapping(t):
            continue
        try:
            setattr(holder, attr, trace_transform(t, rec))
        except Exception:
            pass  # read-only attribute: that transform stays untimed
    if not _timed_class_wanted(type(ds), iterable):
        return False  # batched custom __getitems__: no per-sample boundary to time
    try:
        ds.__class__ = _traced_subclass(type(ds), rec, iterable)
        return True
    except TypeError:  # C-implemented or incompatible layout
        return False


class SampleProxy:
    """What the main-process fetcher sees instead of the dataset (num_workers=0): times each item."""

    # torch's fetcher asks ``hasattr(dataset, "__getitems__") and dataset.__getitems__`` per batch: answer
    # from the class (None: per-item indexing) instead of failing through __getattr__ (an exception each time)
    __getitems__ = None

    def __init__(self, ds, rec: Recorder, iterable: bool):
        self._ds = ds
        self._rec = rec
        self._iterable = iterable
        cls = type(ds)
        if not iterable and getattr(cls, "__getitems__", None) is not None:
            # Torch's fetcher prefers __getitems__: keep that path unless it is plain per-item indexing.
            self.__getitems__ = self._per_item if _uses_plain_getitems(cls) else ds.__getitems__

    def __getitem__(self, idx):
        rec = self._rec
        if not rec.detail:
            return self._ds[idx]
        if rec.itt is not None:
            return _timed_item(rec, self._ds.__getitem__, idx, _index_of(idx))
        # _timed_item without ITT, inlined (the per-sample hot path of num_workers=0 in a detail batch)
        sample = idx if type(idx) is int else _index_of(idx)
        rec.sample = sample
        rec.tf_start = 0
        rec.in_sample = True
        t0 = mono()
        try:
            item = self._ds[idx]
        finally:
            rec.in_sample = False
        t1 = mono()
        try:
            rec.end_sample(t0, t1, sample)
        except Exception as exc:
            rec.fail("sample", exc)
        return item

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


def _pin_envelope(out):
    from lotus.dataloader.envelope import PinEnvelope

    return PinEnvelope(out)


_EVERY = S.BATCH_BYTES_EVERY


def batch_nbytes(out, depth: int = 0) -> int:
    """The bytes of the tensors in a collated batch (anything with an int ``nbytes``: torch tensors, numpy
    arrays), through lists, tuples and dicts up to 3 levels deep; -1 when there is none."""
    n = getattr(out, "nbytes", None)
    if type(n) is int:
        return n
    if depth >= 3:
        return -1
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else ()
    total, found = 0, False
    for x in items:
        b = batch_nbytes(x, depth + 1)
        if b >= 0:
            total, found = total + b, True
    return total if found else -1


def record_bytes(rec: Recorder, t_ns: int, out) -> None:
    """The ``batch_bytes`` record of the batch ``out`` collated at ``t_ns`` (schema version 6)."""
    try:
        rec.rec(S.EV_BATCH_BYTES, t_ns, 0, rec.batch, S.NO_ID, batch_nbytes(out))
    except Exception as exc:
        rec.fail("batch_bytes", exc)


class TimedCollate:
    """collate_fn wrapper: times collation; wraps the batch for pin timing when pinning is on."""

    __slots__ = ("envelope", "fn", "rec")

    def __init__(self, fn, rec: Recorder, envelope: bool):
        self.fn = fn
        self.rec = rec
        self.envelope = envelope

    def __call__(self, data):
        rec = self.rec
        if rec.itt is not None or not rec.on:
            return self._call_itt(data) if rec.on else self.fn(data)
        t0 = mono()
        out = self.fn(data)
        t1 = mono()
        if rec.c0:  # a second collation in one batch (not torch's doing): the first is written now
            self._second(rec)
        # kept, and written with the batch's fetch (Recorder.end_batch; with num_workers=0 the packed
        # batch records of lotus.dataloader.main_side)
        rec.c0 = t0
        rec.c1 = t1
        rec.cn = len(data) if isinstance(data, list) else -1
        if rec.batch % _EVERY == 0:
            record_bytes(rec, t1, out)
        return _pin_envelope(out) if self.envelope else out

    def _call_itt(self, data):
        rec = self.rec
        rec.itt.begin(rec.h_collate)
        t0 = mono()
        try:
            out = self.fn(data)
        finally:
            rec.itt.end()
        t1 = mono()
        if rec.c0:
            self._second(rec)
        rec.c0, rec.c1, rec.cn = t0, t1, len(data) if isinstance(data, list) else -1
        if rec.batch % _EVERY == 0:
            record_bytes(rec, t1, out)
        return _pin_envelope(out) if self.envelope else out

    @staticmethod
    def _second(rec: Recorder) -> None:
        try:
            rec.rec(S.EV_COLLATE, rec.c0, rec.c1 - rec.c0, rec.batch, S.NO_ID, rec.cn)
        except Exception as exc:
            rec.fail("collate", exc)

    def __getattr__(self, name):
        return _delegate(self, name, "fn")
