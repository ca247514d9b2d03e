"""Timing every torchvision ``Compose`` (v1 and v2) wherever the user keeps it.

A Compose may sit in any attribute, a dict, a closure, a nested dataset, an HF-style
``set_transform`` function: lotus does not look for it. Inside the windows lotus controls (a DataLoader
worker process for its whole life; the fetch of a batch in the main process when num_workers=0),
``torchvision.transforms.Compose.__call__`` and ``torchvision.transforms.v2.Compose.forward`` are
replaced at the class level by a timed loop, and restored when the window closes. The user's objects
are never touched.

The timed loop is the Compose loop itself (v1: ``img = t(img)``; v2: the same, unpacking several inputs
exactly as torchvision does), with one clock read per op: the end of one op is the start of the next.
Each op records one event named after it (``Normalize``; ``Normalize#2`` for a second one in the same
Compose). Nested Composes, or an op that calls a Compose inside, attribute time to the innermost ops
once: an op during which other op events were recorded records nothing itself. The first top-level
Compose call of a sample marks where its ``load`` ends and its ``transform`` span begins. Only batches in
detail (:mod:`.budget`) run the timed loop; every other batch runs the original one.

``tests/dataloader/test_compose_timing.py`` checks, against the installed torchvision, that the timed
loop returns exactly what the original does (canary for a torchvision that changes Compose).
"""

from __future__ import annotations

import logging
import sys
import threading

from lotus._names import dedupe
from lotus.dataloader.opnames import op_name
from lotus.dataloader.recorder import Recorder, mono

_log = logging.getLogger("lotus.dataloader")
_get_ident = threading.get_ident

_active: Recorder | None = None  # recorder of the open window (None: no window, original behaviour)
_thread = 0  # the thread the window belongs to (others calling a Compose run it untimed)
_stack: list[tuple] = []  # enclosing windows (a num_workers=0 loader iterated inside another's fetch)
_targets: list[tuple[type, str, object, object]] = []  # patched now: (class, attribute, original, timed)


def _v1_call(self, img):
    rec = _active
    if rec is None or _get_ident() != _thread or not rec.detail:
        return _ORIG_V1(self, img)
    return _timed(rec, self, (img,), False)


def _v2_forward(self, *inputs):
    rec = _active
    if rec is None or _get_ident() != _thread or not rec.detail:
        return _ORIG_V2(self, *inputs)
    return _timed(rec, self, inputs, True)


_ORIG_V1 = _ORIG_V2 = None


def _entry(rec: Recorder, ops) -> tuple:
    """(ops list, its length, event ids, ITT handles) of a Compose's ops, cached per list object.

    Cached by the list's identity and length: a list the user edits in place keeps its old names
    until its length changes (its times are recorded all the same). The cache keeps the list alive,
    so its id cannot be reused by another list meanwhile."""
    now = list(ops)
    names = dedupe([op_name(op) for op in now], "#")  # two Normalize: Normalize, Normalize#2
    ids = tuple(rec.name_id(n) for n in names)
    handles = tuple(rec.itt.handle(n) for n in names) if rec.itt is not None else None
    entry = (ops, len(now), ids, handles)
    rec.compose_ids[id(ops)] = entry
    return entry


def _timed(rec: Recorder, compose, inputs: tuple, v2: bool):
    ops = compose.transforms
    e = rec.compose_ids.get(id(ops))
    if e is None or e[0] is not ops or e[1] != len(ops):
        e = _entry(rec, ops)
    if rec.itt is not None:
        return _timed_itt(rec, ops, e, inputs, v2)
    w = rec.w
    pack = w.pack
    lo, ep, b, smp = rec.loader, rec.epoch, rec.batch, rec.sample
    depth = rec.depth
    rec.depth = depth + 1
    t = mono()
    if not depth and rec.in_sample and not rec.tf_start:
        rec.tf_start = t
    unpack = len(inputs) > 1
    out = inputs[0] if inputs else None
    try:
        for op, nid in zip(ops, e[2]):  # noqa: B905 - same length by construction; strict= costs 0.2 us
            n0 = rec.nrec
            if v2:
                out = op(*inputs)
                inputs = out if unpack else (out,)
            else:
                out = op(out)
            t1 = mono()
            if rec.nrec == n0:  # no op inside it recorded anything: its time is its own
                w.buf += pack(nid, lo, ep, t, t1 - t, b, smp, 0)
                rec.nrec = n0 + 1
            t = t1
    finally:
        rec.depth = depth
    if not depth:
        rec.tf_end = t
    return out


def _timed_itt(rec: Recorder, ops, e: tuple, inputs: tuple, v2: bool):
    """As :func:`_timed`, with an ITT task per op (VTune); the Loader task ends at the first op."""
    itt = rec.itt
    ids, handles = e[2], e[3]
    top = rec.depth == 0
    rec.depth += 1
    t = mono()
    if top and rec.in_sample and not rec.tf_start:
        rec.tf_start = t
        itt.end()  # the sample's Loader task
    unpack = len(inputs) > 1
    out = inputs[0] if inputs else None
    try:
        for op, nid, h in zip(ops, ids, handles):  # noqa: B905 - same length by construction
            n0 = rec.nrec
            itt.begin(h)
            try:
                if v2:
                    out = op(*inputs)
                    inputs = out if unpack else (out,)
                else:
                    out = op(out)
            finally:
                itt.end()
            t1 = mono()
            if rec.nrec == n0:
                rec.rec(nid, t, t1 - t, rec.batch, rec.sample, 0)
                rec.nrec = n0 + 1
            t = t1
    finally:
        rec.depth -= 1
    if top:
        rec.tf_end = t
    return out


def _find_targets() -> list[tuple[type, str, object, object]]:
    """The Compose classes to time, among those already imported (lotus never imports torchvision:
    a dataset using it has imported it by the time lotus iterates, also in spawned workers, where
    unpickling the dataset imports its modules)."""
    global _ORIG_V1, _ORIG_V2
    targets = []
    v1 = sys.modules.get("torchvision.transforms.transforms")
    cls = getattr(v1, "Compose", None)
    if cls is not None:
        fn = cls.__dict__.get("__call__")
        if fn is _v1_call or getattr(fn, "__qualname__", "") == "Compose.__call__":
            _ORIG_V1 = fn if fn is not _v1_call else _ORIG_V1
            targets.append((cls, "__call__", _ORIG_V1, _v1_call))
    v2 = sys.modules.get("torchvision.transforms.v2._container")
    cls = getattr(v2, "Compose", None)
    if cls is not None:
        fn = cls.__dict__.get("forward")
        if fn is _v2_forward or getattr(fn, "__qualname__", "") == "Compose.forward":
            _ORIG_V2 = fn if fn is not _v2_forward else _ORIG_V2
            targets.append((cls, "forward", _ORIG_V2, _v2_forward))
    return targets


def patch_classes() -> None:
    """Install the timed methods (counted: each call needs one :func:`unpatch_classes`).

    Installed for the batches in detail only (:mod:`.budget`): a worker patches when a detail batch
    starts and unpatches when it ends, the main process (num_workers=0) for the fetch of a detail batch;
    every other batch runs torchvision's own ``Compose`` with no lotus frame at all. Replacing a class
    attribute invalidates the interpreter's attribute caches: that cost (a few us per detail batch) is
    part of the detail cost the budget accounts for. Outside a window the timed methods call the
    originals at once."""
    global _patches, _targets
    _patches += 1
    if _patches == 1:
        _targets = _find_targets()
        for cls, attr, _, timed in _targets:
            setattr(cls, attr, timed)


def unpatch_classes() -> None:
    """Undo one :func:`patch_classes`; the classes get their own methods back with the last one."""
    global _patches
    if _patches <= 0:
        return
    _patches -= 1
    if _patches == 0:
        for cls, attr, orig, _ in _targets:
            setattr(cls, attr, orig)


_patches = 0


def open_window(rec: Recorder, patch: bool = True) -> None:
    """From now on, Compose calls on this thread are timed into ``rec`` (until :func:`close_window`).
    ``patch=False``: the caller installs the timed methods itself when it wants timing (a worker: for
    its detail batches only)."""
    global _active, _thread
    if patch and not _patches:
        patch_classes()  # a window outside any iterator (tests, tools): patched for its own life
        _stack.append((_active, _thread, True))
    else:
        _stack.append((_active, _thread, False))
    _active, _thread = rec, _get_ident()


def close_window() -> None:
    """Close the innermost window."""
    global _active, _thread
    if not _stack:
        return
    _active, _thread, own = _stack.pop()
    if own:
        unpatch_classes()


class ComposeWindow:
    """``with ComposeWindow(rec): ...`` times every Compose called inside (see the module doc)."""

    __slots__ = ("rec",)

    def __init__(self, rec: Recorder):
        self.rec = rec

    def __enter__(self):
        open_window(self.rec)
        return self

    def __exit__(self, *exc) -> None:
        close_window()


def reset_after_fork() -> None:
    """A forked worker inherits its parent's windows: they are not the worker's."""
    global _active, _thread
    _stack.clear()
    _active, _thread = None, 0
