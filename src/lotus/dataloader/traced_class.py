"""Keep a worker's traced dataset copy behaving as an instance of the user's own class.

In a worker, lotus makes the dataset copy's class a same-named subclass that times ``__getitem__`` /
``__iter__`` (:func:`lotus.dataloader.instrument.instrument_in_worker`). Two things torch does in a
worker broke with such a class when the dataset is an ``IterDataPipe`` (whatever the start method):

* **Pickling.** ``_worker_loop`` calls ``graph_settings.apply_random_seed``, whose ``graph.traverse_dps``
  walks the pipe graph with a pickler. A class made at run time cannot be pickled by reference: pickle
  looks ``module.qualname`` up, finds the user's class and fails with ``PicklingError: Can't pickle
  <class '..._IterDataPipeSerializationWrapper'>: it's not the same object as ...``. User code that
  pickles or copies its dataset in a worker failed the same way.
* **One iterator per IterDataPipe.** The DataPipe metaclass wraps every ``__iter__`` found in a class
  body with its iterator-validity hook. The subclass's timing ``__iter__`` got its own hook on top of
  the user's class's one, so each ``iter()`` registered two iterators and the outer one was reported
  "invalidated because another iterator has been created from the same IterDataPipe".

:func:`make_faithful` repairs both on the subclass: instances reduce through the user's class's own
reduction (``__reduce_ex__``/``__reduce__``/``__getstate__`` and torch's DataPipe hooks) with the user's
class put where the traced one appears, so a pickled or copied dataset is an ordinary, untraced
instance of the user's class; and the timing ``__iter__`` is set without the metaclass's hook, so only
the user's class's hook tracks iterators, exactly as without lotus.
"""

from __future__ import annotations

import copyreg


def _new_untraced(cls, *args):
    """``copyreg.__newobj__`` under another name (pickle checks a ``__newobj__`` callable's class
    against ``obj.__class__``, which is the traced class while the object is being saved)."""
    return cls.__new__(cls, *args)


def _new_ex_untraced(cls, args, kwargs):
    """``copyreg.__newobj_ex__`` under another name (see :func:`_new_untraced`)."""
    return cls.__new__(cls, *args, **kwargs)


def untraced_reduce(rv, traced: type, cls: type):
    """A reduce value of an instance of ``traced`` rewritten to rebuild an instance of ``cls``."""
    if not isinstance(rv, tuple) or len(rv) < 2:
        return rv  # a global name, or something pickle rejects exactly as it would without lotus
    func, args, rest = rv[0], rv[1], rv[2:]
    if isinstance(args, tuple) and args and args[0] is traced:
        if func is copyreg.__newobj__:
            return (_new_untraced, (cls, *args[1:]), *rest)
        if func is copyreg.__newobj_ex__:
            return (_new_ex_untraced, (cls, *args[1:]), *rest)
    if func is traced:
        func = cls
    if isinstance(args, tuple):
        args = tuple(cls if a is traced else a for a in args)  # copyreg._reconstructor (protocols 0, 1)
    return (func, args, *rest)


def _unhook_iter(traced: type) -> None:
    """Drop the DataPipe metaclass's iterator hook from the subclass's own ``__iter__``."""
    try:
        from torch.utils.data import IterDataPipe
    except ImportError:  # pragma: no cover - torch without DataPipes
        return
    fn = traced.__dict__.get("__iter__")
    inner = getattr(fn, "__wrapped__", None)
    if issubclass(traced, IterDataPipe) and inner is not None:
        traced.__iter__ = inner  # set after class creation: the metaclass does not hook it again


def make_faithful(traced: type, cls: type) -> None:
    """Make the lotus subclass ``traced`` of ``cls`` pickle, copy and iterate as ``cls`` does."""
    if "__reduce_ex__" in traced.__dict__:
        return  # done already (the class is cached per loader and worker)
    _unhook_iter(traced)

    def __reduce_ex__(self, protocol):
        return untraced_reduce(super(traced, self).__reduce_ex__(protocol), traced, cls)

    __reduce_ex__.__qualname__ = f"{traced.__qualname__}.__reduce_ex__"
    traced.__reduce_ex__ = __reduce_ex__
