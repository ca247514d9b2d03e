"""The num_workers=0 iterator of a plain traced loop: the same records as
:class:`lotus.dataloader.iterators.TracedSingleProcessIter`, with the least work per batch.

Here a batch costs three frames of lotus: ``__next__`` (the detail choice, the loop's wait and hand-off),
``_next_index`` (the dispatch's end) and the collate function (a closure, which torch's
fetcher calls as Python calls Python: an object with ``__call__`` costs a C-level re-entry); torch's own
``_next_data`` runs between them. A batch's clock reads are kept as one tuple and packed in bulk
(:meth:`FastSingleProcessIter._lotus_drain`: every 64 batches, before the budget's next choice, before any
other record of this iterator, at the epoch's end and from every writer flush, the flusher thread's
included): packing and appending one batch's pair in place cost 2.2-3.0 us, six to eight times a tight loop's figure,
as the batch's own work evicts the tracer's code and data (docs/overhead.md). Used when the loader has
no ITT tasks, no pinning, no probe end (``lotus run --steps``) and no replay
(``DataLoader._get_iterator`` picks it); anything else takes the general path. A detail batch's Compose
patch (:class:`lotus.dataloader.transforms.TransformSwap`) is entered before torch's ``__next__`` and
left after it, whichever way it returns. An iterator is one epoch of its loader: its records carry the
epoch the loader was in when the iterator was made (``DataLoader.__iter__`` counts epochs).
"""

from __future__ import annotations

import threading
import weakref

from lotus.dataloader import _torch_compat as compat
from lotus.dataloader import gpu as _gpu
from lotus.dataloader.instrument import TimedCollate, record_bytes
from lotus.dataloader.iterators import TracedSingleProcessIter
from lotus.dataloader.main_side import _MainSide, main_heads, main_pair
from lotus.dataloader.recorder import mono
from lotus.trace import schema as S

_NO_PREV = (S.NO_ID, 0)
_Torch = compat.SingleProcessIter
_torch_next, _torch_next_index = _Torch.__next__, _Torch._next_index  # globals: one cached lookup each


class _Unopened:
    """Stands in for the recorder when this iterator could not set tracing up (``_next_index`` writes here)."""

    __slots__ = ("f0",)


def _collate_timer(fn, rec):
    """The fast path's collate wrapper: a plain function (torch's fetcher calls it as Python calls Python;
    an object with ``__call__`` costs a C-level re-entry per batch). Same records as TimedCollate."""
    second = TimedCollate._second
    every = S.BATCH_BYTES_EVERY

    def collate(data):
        t0 = mono()
        out = fn(data)
        t1 = mono()
        if rec.c0 and rec.on:  # a second collation in one batch (not torch's doing): the first is written now
            second(rec)
        rec.c0 = t0
        rec.c1 = t1
        rec.cn = len(data) if isinstance(data, list) else -1
        if rec.batch % every == 0 and rec.on:
            record_bytes(rec, t1, out)
        return out

    return collate


class FastSingleProcessIter(TracedSingleProcessIter):
    """num_workers=0, a plain traced loop (see the module doc)."""

    _next_data = _Torch._next_data  # torch's own: the batch opens in _next_index, closes in __next__

    def __init__(self, loader) -> None:
        super().__init__(loader)
        self._lotus_ep = ep = self._lt.epoch  # this iterator's epoch (a new iterator per epoch)
        self._lotus_pb, self._lotus_pt = _NO_PREV  # the batch the loop holds and its hand-off
        # each batch's clock reads, packed in bulk by _lotus_drain (every _ROWS batches, before the
        # budget's next choice, at the epoch's end, before any other record of this iterator, and
        # from the writer's flush, the flusher thread's included: records stay <= ~0.5 s late)
        self._lotus_rows: list = []
        self._lotus_lock = threading.Lock()
        rec = self._lotus_rec
        if rec is None:
            self._lotus_rec = _Unopened()
        else:
            rec.epoch = ep
            self._lotus_heads = main_heads(rec.loader, ep)  # fixed for the iterator (one epoch of one loader)
            rec.budget.skip = 0  # the epoch's first batch asks the budget (always detail)
            self._lotus_ltid = id(self._lt)
            rec.w.drains.append(weakref.WeakMethod(self._lotus_drain))

    def _lotus_collate(self, rec):
        if self._pin_memory or rec.itt is not None:  # (not a fast-path loop: kept for safety)
            return super()._lotus_collate(rec)
        return _collate_timer(self._collate_fn, rec)

    def __next__(self):
        lt = self._lt
        if not lt.on:  # tracing stopped (a failure): torch's loop, untraced from now on
            return _MainSide.__next__(self)
        w0 = d0 = mono()  # the loop asks for the batch: its dispatch starts (after lotus's own work, if any)
        cuda = self._lotus_cuda
        if cuda is not None:  # CUDA is available: events once it is initialised (lotus.dataloader.gpu)
            if cuda.wanted:
                self._lotus_request(cuda)
                d0 = mono()
            else:
                cuda = None
        rec = self._lotus_rec
        budget = rec.budget
        if budget.skip:  # plain whatever this batch costs (DetailBudget.step): the fetcher is the plain one
            budget.skip -= 1
            detail = False
        else:
            detail = self._lotus_choose(rec, budget)
            d0 = mono()
        rec.c0 = 0
        rec.batch = batch = self._num_yielded
        meter = self._lotus_meter  # started where the fetch starts (_next_index)
        try:
            data = _torch_next(self)
        except BaseException as exc:
            self._lotus_close(exc, w0, d0)
            self._lotus_next_failed(w0, exc)
            raise
        t1 = mono()
        try:
            if meter is not None:
                meter.record(rec, S.EV_RUNQ, rec.f0, batch)
            if detail:
                self._lotus_swap.__exit__(None, None, None)
            # the batch's clock reads as they are: packed with the others later (_lotus_drain)
            rows = self._lotus_rows
            rows.append((batch, d0, rec.f0, rec.c0, rec.c1, rec.cn, w0, t1, detail))
            lt.last_batch = batch
            if cuda is not None:
                cuda.got(batch)
            if _gpu._active_id != self._lotus_ltid:  # (reset when the active one is collected)
                _gpu.set_active(lt)
            if len(rows) >= _ROWS:
                self._lotus_drain(True)
        except Exception as exc:
            lt.fail("next", exc)
        return data

    def _lotus_drain(self, flush: bool = False) -> None:
        """The kept batches as packed pairs into the writer's buffer (exactly the records that
        _MainSide._lotus_after writes one batch at a time; tests/dataloader/test_fastpath.py), their
        preparation to the detail budget. From the loop's thread or the flusher thread (a lock); ``flush``:
        the loop's thread writes the buffer out when it is over its bound."""
        lt = self._lt
        with self._lotus_lock:
            rows = self._lotus_rows
            n = len(rows)
            if not n:
                return
            chunk = rows[:n]
            del rows[:n]  # (the loop only appends: what came meanwhile stays for the next drain)
            if not lt.on:
                return
            pb, pt = self._lotus_pb, self._lotus_pt
            heads = self._lotus_heads
            prep = 0
            out = []
            for batch, d0, f0, c0, c1, cn, w0, t1, detail in chunk:
                end = c1 if c0 else t1  # the batch is ready when its collation returns
                prep += end - f0
                out.append(main_pair(heads, batch, d0, f0, c0, cn, end, w0, t1, pb, pt, detail))
                pb, pt = batch, t1
            self._lotus_pb, self._lotus_pt = pb, pt
            rec = self._lotus_rec
            budget = rec.budget
            budget.prep_ns += prep
            budget.prep_n += n
            w = rec.w
            w.buf += b"".join(out)
        if flush and len(w.buf) >= w.flush_bytes:
            lt.flush()

    def _lotus_choose(self, rec, budget) -> bool:
        """The budget's choice for the batch about to start (its first of the epoch: always detail)."""
        self._lotus_drain()  # the kept batches' preparation first
        ep = self._lotus_ep
        rec.epoch = ep
        with self._lotus_lock:  # (a drain from the flusher thread adds to the budget meanwhile)
            rec.detail = detail = rec.on and budget.step(ep, rec.nrec, rec.nsamp)
        if detail:  # per-sample/per-op detail: timed items, and Composes timed until __next__ returns
            self._dataset_fetcher = self._lotus_detail_fetcher
            self._lotus_swap.__enter__()
        else:  # the user's dataset itself, untimed transforms: only the batch's records
            self._dataset_fetcher = self._lotus_plain_fetcher
        return detail

    def _next_index(self):
        index = _torch_next_index(self)  # StopIteration: the epoch ends, no batch was opened
        meter = self._lotus_meter
        if meter is not None:
            meter.start()
        self._lotus_rec.f0 = mono()  # the batch opens: dispatch ends, fetch starts
        return index

    def _lotus_epoch_end(self, how: int) -> None:
        self._lotus_drain()
        super()._lotus_epoch_end(how)

    def _lotus_step_done(self, t0: int) -> None:
        self._lotus_drain()
        pb = self._lotus_pb
        if pb != S.NO_ID:
            self._lotus_pb = S.NO_ID
            self._lt.record(S.EV_STEP, self._lotus_pt, t0 - self._lotus_pt, pb, S.NO_ID, 0)

    def _lotus_close(self, exc: BaseException, w0: int, d0: int) -> None:
        """torch's __next__ raised: the Compose patch ends; a batch that was opened (its fetch started
        after ``w0``) is recorded as failed (its dispatch, a finished collation, the failed or exhausted
        fetch), after the kept batches."""
        rec = self._lotus_rec
        try:
            self._lotus_drain()
            if rec.detail:
                rec.detail = False
                self._lotus_swap.__exit__(None, None, None)
            if rec.f0 > w0:
                self._lotus_t0 = rec.f0
                self._lotus_failed_batch(rec, exc, d0)
        except Exception as err:
            self._lt.fail("fetch", err)


_ROWS = 64  # batches kept before they are packed
