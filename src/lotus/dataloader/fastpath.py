"""The num_workers=0 iterator of a plain traced loop: the same records as
:class:`lotus.dataloader.iterators.TracedSingleProcessIter`, with the least Python per batch.

The tracer's fixed cost per batch is the Python it runs (docs/overhead.md: ~465 bytecodes per batch
before this path, ~330 with it). Here a batch costs three frames of lotus: ``__next__`` (the
loop's wait and hand-off, the batch's records in one packed pair), ``_next_index`` (the detail choice,
the dispatch's clock reads) and the collate wrapper (collation); torch's own ``_next_data`` runs between
them. Used when the loader has no ITT tasks, no pinning, no probe end (``lotus run --steps``) and no
replay (``DataLoader._get_iterator`` picks it); anything else takes the general path. A detail batch's
Compose patch (:class:`lotus.dataloader.transforms.TransformSwap`) is entered in ``_next_index`` and left
in ``__next__``, whichever way torch's ``__next__`` returns.
"""

from __future__ import annotations

from lotus.dataloader import _torch_compat as compat
from lotus.dataloader import gpu as _gpu
from lotus.dataloader.iterators import TracedSingleProcessIter
from lotus.dataloader.main_side import _MainSide
from lotus.dataloader.recorder import mono
from lotus.trace import schema as S

_MAIN_BATCH, _MAIN_LOOP, _ITEMS, _DETAIL = S.EV_MAIN_BATCH, S.EV_MAIN_LOOP, S.MAIN_ITEMS_SHIFT, S.FETCH_DETAIL
_NO_PREV = (S.NO_ID, 0)
_Torch = compat.SingleProcessIter
_torch_next, _torch_next_index = _Torch.__next__, _Torch._next_index  # globals: one cached lookup each


class FastSingleProcessIter(TracedSingleProcessIter):
    """num_workers=0, a plain traced loop (see the module doc)."""

    _next_data = _Torch._next_data  # torch's own: the batch opens in _next_index, closes in __next__

    def __next__(self):
        lt = self._lt
        if not lt.on:  # tracing stopped (a failure): torch's loop, untraced from now on
            self._lotus_active = False
            return _MainSide.__next__(self)
        w0 = mono()
        cuda = self._lotus_cuda
        if cuda is not None:
            self._lotus_request(cuda)
        self._lotus_opened = None
        try:
            data = _torch_next(self)
        except BaseException as exc:
            self._lotus_close(exc)
            self._lotus_next_failed(w0, exc)
            raise
        t1 = mono()
        rec = self._lotus_rec
        try:
            detail = rec.detail
            if detail:
                self._lotus_swap.__exit__(None, None, None)
            d0, f0 = self._lotus_opened
            c0 = rec.c0
            end = rec.c1 if c0 else t1  # the batch is ready when its collation returns
            rec.budget.prep_ns += end - f0
            batch = rec.batch
            prev = self._lotus_prev
            pb, pt = prev if prev is not None else _NO_PREV
            w = lt.w
            lo, ep = rec.loader, rec.epoch
            # the packed pair and the hand-off's bookkeeping as in _MainSide._lotus_after, inlined: a call
            # here is a measurable share of the per-batch cost (tests/dataloader/test_fastpath.py keeps the
            # two paths' records equal)
            w.buf += _PACK2(_MAIN_BATCH, lo, ep, d0, end - d0, batch, f0 - d0, c0 - d0 if c0 else -1,
                            _MAIN_LOOP, lo, ep, w0, t1 - w0, pb, pt,
                            (_DETAIL if detail else 0) | (rec.cn + 1 if c0 else 0) << _ITEMS)
            if cuda is not None:
                cuda.got(batch)
            self._lotus_prev = (batch, t1)
            lt.last_batch = batch
            lt.consumed += 1
            if _gpu._active_id != id(lt):  # (reset when the active one is collected)
                _gpu.set_active(lt)
            if len(w.buf) >= w.flush_bytes:  # by time: the flusher thread (lotus.trace.writer)
                lt.flush()
        except Exception as exc:
            lt.fail("next", exc)
        return data

    def _next_index(self):
        if not self._lotus_active:
            return _torch_next_index(self)
        rec = self._lotus_rec
        rec.epoch = ep = self._lt.epoch
        rec.c0 = 0
        budget = rec.budget
        if budget.skip and ep == budget.epoch:  # plain whatever this batch costs (DetailBudget.step)
            budget.skip -= 1
            rec.detail = detail = False
        else:
            rec.detail = detail = rec.on and budget.step(ep, rec.nrec, rec.nsamp)
        if detail:  # per-sample/per-op detail: timed items, and Composes timed until __next__ returns
            self._dataset_fetcher = self._lotus_detail_fetcher
            self._lotus_swap.__enter__()
        else:  # the user's dataset itself, untimed transforms: only the batch's records
            self._dataset_fetcher = self._lotus_plain_fetcher
        d0 = mono()
        try:
            index = _torch_next_index(self)
        except BaseException:  # StopIteration: the epoch ends, no batch was opened
            if detail:
                rec.detail = False
                self._lotus_swap.__exit__(None, None, None)
            raise
        self._lotus_opened = (d0, mono())  # the batch opens: dispatch ends, fetch starts
        rec.batch = self._num_yielded
        return index

    def _lotus_close(self, exc: BaseException) -> None:
        """torch's __next__ raised: the Compose patch ends; a batch that was opened is recorded as failed
        (its dispatch, a finished collation, the failed or exhausted fetch)."""
        rec = self._lotus_rec
        try:
            if rec.detail:
                rec.detail = False
                self._lotus_swap.__exit__(None, None, None)
            opened = self._lotus_opened
            if opened is not None:
                self._lotus_t0 = opened[1]
                self._lotus_failed_batch(rec, exc, opened[0])
        except Exception as err:
            self._lt.fail("fetch", err)


_PACK2 = S.PACK2
