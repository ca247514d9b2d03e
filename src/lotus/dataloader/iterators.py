"""Main-process side: subclasses of torch's two DataLoader iterators.

Each override calls torch's implementation through ``super()`` and records around it:

* ``_try_put_index``  -> ``dispatch`` (batch, target worker, sampler + put time)
* ``_get_data``       -> ``arrive`` (a batch came off the result/pin queue)
* ``_next_data``      -> which batch is returned, whether it was already buffered, pin times
* ``__next__``        -> ``wait`` (the loop blocked in next()), ``consumed``, the previous ``step``,
                         and the CUDA events of :mod:`lotus.dataloader.gpu`

With num_workers=0 the same events come from the main process, plus the per-sample and collation
events of :mod:`lotus.dataloader.instrument`. The loader policies of :mod:`lotus.dataloader.policy`
(which worker gets the next batch, which ready batch the loop gets) are applied here too.
"""

from __future__ import annotations

from lotus.dataloader import _torch_compat as compat
from lotus.dataloader.envelope import PinEnvelope
from lotus.dataloader.instrument import _PACK2, _PACK3, SampleProxy, TimedCollate
from lotus.dataloader.main_side import _MainSide
from lotus.dataloader.policy import DELIVERY_LOWEST_READY
from lotus.dataloader.recorder import mono
from lotus.dataloader.transforms import TransformSwap
from lotus.trace import schema as S

# the hot path's record kinds as module constants (one cached global load each)
_DISPATCH, _COLLATE, _FETCH, _NO_ID, _DETAIL = S.EV_DISPATCH, S.EV_COLLATE, S.EV_FETCH, S.NO_ID, S.FETCH_DETAIL
_RUNQ = S.EV_RUNQ


def _meter():
    """The loop thread's fetch meter (lotus.dataloader.schedstat.FetchMeter); None without procfs."""
    from lotus.dataloader.schedstat import FetchMeter

    m = FetchMeter()
    return m if m.sched.fd >= 0 else None


class TracedSingleProcessIter(_MainSide, compat.SingleProcessIter):
    """num_workers=0: the main process loads, transforms and collates; all of it is recorded.

    Per batch: ``_next_data`` chooses the batch's detail and takes the dispatch's start, ``_next_index``
    its end, the collate wrapper the collation's; ``__next__`` (lotus.dataloader.main_side) writes the
    batch with its wait as one packed pair (schema.EV_MAIN_BATCH). A plain traced loop (no ITT,
    pinning, probe end or replay) gets a :class:`lotus.dataloader.fastpath.FastSingleProcessIter` instead
    (:meth:`lotus.dataloader.loader.DataLoader._get_iterator`)."""

    def __init__(self, loader) -> None:
        super().__init__(loader)
        self._lotus_init(loader)
        lt = self._lt
        self._lotus_swap = None
        self._lotus_rec = None  # set when tracing this iterator works
        self._lotus_meter = None  # the loop thread's schedstat around each fetch (lotus.dataloader.schedstat)
        if not lt.on:
            return
        try:
            rec = lt.recorder()
            iterable = compat.is_iterable_kind(self._dataset_kind)
            proxy = SampleProxy(self._dataset, rec, iterable)
            collate = self._lotus_collate(rec)
            self._lotus_detail_fetcher = compat.create_fetcher(
                self._dataset_kind, proxy, self._auto_collation, collate, self._drop_last)
            # batches without detail: the user's dataset itself (no per-sample proxy call), collation timed
            self._lotus_plain_fetcher = self._lotus_detail_fetcher if iterable else compat.create_fetcher(
                self._dataset_kind, self._dataset, self._auto_collation, collate, self._drop_last)
            self._dataset_fetcher = self._lotus_detail_fetcher
            self._lotus_swap = TransformSwap(self._dataset, rec)  # patches Compose while a detail batch runs
            self._lotus_epoch_start()
            self._lotus_rec = rec
            self._lotus_active = rec.itt or True  # _next_index times the batch's opening (and ITT)
            self._lotus_meter = _meter()
        except Exception as exc:  # fall back to torch's own fetcher, untraced samples
            lt.fail("iterator", exc)

    def _lotus_collate(self, rec):
        """The timed collate function both fetchers call."""
        return TimedCollate(self._collate_fn, rec, envelope=bool(self._pin_memory))

    def _next_index(self):
        index = super()._next_index()  # StopIteration ends the epoch before any batch is opened
        active = self._lotus_active
        if active:  # the batch opens: dispatch ends, fetch starts
            meter = self._lotus_meter
            if meter is not None:
                meter.start()
            self._lotus_t0 = mono()
            if active is not True:
                active.begin(self._lotus_rec.h_batch)  # ITT
        return index

    def _next_data(self):
        rec = self._lotus_rec
        if rec is None or not self._lt.on:
            self._lotus_active = False
            plain = getattr(self, "_lotus_plain_fetcher", None)
            if plain is not None:
                self._dataset_fetcher = plain
            return self._lotus_unwrap(super()._next_data())[0]
        self._lotus_t0 = None
        rec.epoch = self._lt.epoch
        rec.batch = batch = self._num_yielded
        rec.c0 = d0 = 0
        rec.detail = detail = rec.on and rec.budget.step(rec.epoch, rec.nrec, rec.nsamp)
        meter = self._lotus_meter  # started where the fetch starts (_next_index)
        try:
            if detail:  # per-sample/per-op detail for this batch: timed items and transforms
                self._dataset_fetcher = self._lotus_detail_fetcher
                with self._lotus_swap:
                    d0 = mono()
                    data = super()._next_data()
            else:  # the plain path: the dataset's own items, untimed transforms, only the batch's records
                self._dataset_fetcher = self._lotus_plain_fetcher
                d0 = mono()
                data = super()._next_data()
        except BaseException as exc:
            self._lotus_failed_batch(rec, exc, d0)
            raise
        c0 = rec.c0
        end = rec.c1 if c0 else mono()  # the batch is ready when its collation returns
        t0 = self._lotus_t0
        if meter is not None and t0 is not None:
            try:
                meter.record(rec, _RUNQ, t0, batch)
            except Exception as exc:
                self._lotus_meter = None
                rec.fail("schedstat", exc)
        if self._lotus_active is not True:
            rec.itt.end()
        budget = rec.budget
        budget.prep_ns += end - t0
        budget.prep_n += 1
        if type(data) is PinEnvelope:  # pinned: the batch's records now, pin and wait in __next__
            return self._lotus_pinned(rec, data, batch, d0, t0, c0, detail)
        # the batch's records are written with its wait, by __next__ (lotus.dataloader.main_side)
        self._lotus_last = (batch, d0, t0, c0, rec.cn, end, detail)
        return data

    def _lotus_pinned(self, rec, env: PinEnvelope, batch: int, d0: int, t0: int, c0: int, detail: bool):
        data, p0, p1 = env.data, env.pin_start_ns, env.pin_end_ns
        try:
            lo, ep, flags = rec.loader, rec.epoch, _DETAIL if detail else 0
            if c0:
                rec.w.buf += _PACK3(_DISPATCH, lo, ep, d0, t0 - d0, batch, _NO_ID, -1,
                                    _COLLATE, lo, ep, c0, rec.c1 - c0, batch, _NO_ID, rec.cn,
                                    _FETCH, lo, ep, t0, p0 - t0, batch, _NO_ID, flags)
            else:
                rec.w.buf += _PACK2(_DISPATCH, lo, ep, d0, t0 - d0, batch, _NO_ID, -1,
                                    _FETCH, lo, ep, t0, p0 - t0, batch, _NO_ID, flags)
            self._lotus_last = (batch, False, p0, p1)
        except Exception as exc:
            self._lt.fail("fetch", exc)
        return data

    def _lotus_failed_batch(self, rec, exc: BaseException, d0: int) -> None:
        """A batch was opened and failed (the user's error, re-raised by the caller) or found its
        IterableDataset exhausted (no batch): its dispatch, a finished collation and the failed fetch."""
        t0 = self._lotus_t0
        if t0 is None:
            return
        try:
            if rec.itt is not None:
                rec.itt.end()
            c0 = rec.c0
            rec.rec(S.EV_DISPATCH, d0, t0 - d0, rec.batch, S.NO_ID, -1)
            if c0:
                rec.rec(S.EV_COLLATE, c0, rec.c1 - c0, rec.batch, S.NO_ID, rec.cn)
            if isinstance(exc, StopIteration):
                rec.rec(S.EV_EXHAUSTED, t0, mono() - t0, rec.batch, S.NO_ID, 0)
            else:
                rec.rec(S.EV_FETCH, t0, mono() - t0, rec.batch, S.NO_ID, S.FETCH_ERROR)
        except Exception as err:
            self._lt.fail("fetch", err)


class TracedMultiProcessingIter(_MainSide, compat.MultiProcessingIter):
    """num_workers>0: dispatch, arrival, pinning, waits and consumption in the main process,
    and the worker-assignment / delivery-order policies."""

    def __init__(self, loader) -> None:
        self._lotus_init(loader)
        n = loader.num_workers
        self._lotus_inflight = [0] * n  # dispatched to a worker and not yet back, per worker
        self._lotus_next_rr = 0
        self._lotus_gots: list[int] = []  # batch ids received during the current _next_data
        super().__init__(loader)  # spawns the workers (through TracingContext) and calls _reset

    def _reset(self, loader, first_iter=False) -> None:
        self._lotus_inflight = [0] * self._num_workers
        if first_iter and getattr(loader, "_lotus_rng_state", None) is not None:
            from lotus.dataloader.auto import restore_rng

            restore_rng(loader)  # num_workers="auto" restarted persistent workers (see lotus.dataloader.auto)
        if self._lt.on:
            try:
                self._lotus_epoch_start()
            except Exception as exc:
                self._lt.fail("reset", exc)
        super()._reset(loader, first_iter)

    def _shutdown_workers(self) -> None:
        super()._shutdown_workers()
        lt = self._lt
        if lt.on:
            try:
                lt.flush()
            except Exception as exc:
                lt.fail("shutdown", exc)

    def _try_put_index(self) -> None:
        policy = self._lotus_policy
        if policy.free_worker:
            w = policy.pick_worker(self._lotus_inflight, self._workers_status, self._lotus_next_rr)
            if w is not None:
                # torch takes the next worker from this iterator: offer the free one first
                self._worker_queue_idx_cycle = policy.cycle_from(w, self._num_workers)
                self._lotus_next_rr = (w + 1) % self._num_workers
        lt = self._lt
        t0 = mono()
        n = self._send_idx
        if policy.delivery == DELIVERY_LOWEST_READY:
            in_order, self._in_order = self._in_order, True  # dispatch exactly as with in_order=True
            try:
                super()._try_put_index()
            finally:
                self._in_order = in_order
        else:
            super()._try_put_index()
        if self._send_idx != n:
            worker = self._task_info[n][0]
            self._lotus_inflight[worker] += 1
            if lt.on:
                try:
                    lt.record(S.EV_DISPATCH, t0, mono() - t0, n, S.NO_ID, worker)
                except Exception as exc:
                    lt.fail("dispatch", exc)

    def _get_data(self):
        r = super()._get_data()
        idx = r[0]
        if type(idx) is int:
            info = self._task_info.get(idx)
            if info is not None:
                self._lotus_inflight[info[0]] -= 1
            exhausted = type(r[1]) is compat.IterableDatasetStopIteration
            if not exhausted:
                self._lotus_gots.append(idx)
            if self._lt.on:
                try:
                    self._lt.record(S.EV_ARRIVE, mono(), 0, idx, S.NO_ID, S.ARRIVE_EXHAUSTED if exhausted else 0)
                except Exception as exc:
                    self._lt.fail("arrive", exc)
        return r

    def _next_data(self):
        task_info = self._task_info
        before = [i for i, info in task_info.items() if len(info) == 2]  # already arrived (buffered)
        self._lotus_gots = []
        if self._lotus_policy.delivery == DELIVERY_LOWEST_READY:
            found, data = self._next_lowest_ready(before)
            if found:
                return data
            self._in_order = False  # nothing is ready: hand out whichever batch arrives first
            try:
                data = super()._next_data()
            finally:
                self._in_order = True
        else:
            data = super()._next_data()
        data, p0, p1 = self._lotus_unwrap(data)
        if self._lt.on:
            # The batch handed out is the one that was buffered or arrived during this call and has
            # left torch's task table (torch returns it without saying which it was).
            task_info = self._task_info
            gone = [i for i in (*before, *self._lotus_gots) if i not in task_info]
            batch = gone[0] if len(gone) == 1 else (min(gone) if gone else S.NO_ID)
            self._lotus_last = (batch, batch in before, p0, p1)
        return data

    def _next_lowest_ready(self, ready: list[int]):
        """(True, the lowest-indexed batch that already arrived), or (False, None) when none has."""
        if not ready:
            return False, None
        lowest = min(ready)
        if lowest == self._rcvd_idx:
            data = super()._next_data()  # torch's own in-order path returns it
            batch = lowest
        else:
            worker, data = self._task_info.pop(lowest)
            data = self._process_data(data, worker)  # re-raises a worker's exception like torch
            batch = lowest
        data, p0, p1 = self._lotus_unwrap(data)
        if self._lt.on:
            self._lotus_last = (batch, True, p0, p1)
        return True, data
