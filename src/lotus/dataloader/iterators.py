"""Main-process side of tracing: subclasses of torch's two DataLoader iterators.

Each override calls torch's implementation through ``super()`` and records around it:

* ``_try_put_index``  -> ``dispatch`` (batch, target worker, sampler + put time)
* ``_get_data``       -> ``arrive`` (a batch came off the result/pin queue)
* ``_next_data``      -> which batch is returned, whether it was already buffered, pin times
* ``__next__``        -> ``wait`` (the loop blocked in next()), ``consumed``, and the previous ``step``

With num_workers=0 the same events come from the main process, plus the per-sample and collation
events of :mod:`lotus.dataloader.instrument`.
"""

from __future__ import annotations

from lotus.dataloader import _torch_compat as compat
from lotus.dataloader.envelope import PinEnvelope
from lotus.dataloader.instrument import SampleProxy, TimedCollate, TransformSwap
from lotus.dataloader.recorder import Recorder, mono
from lotus.trace import schema as S


class _MainSide:
    """State and recording shared by both traced iterators (mixin; torch's class comes second)."""

    def _lotus_init(self, loader) -> None:
        self._lt = loader._lotus  # LoaderTrace
        self._lotus_active = False
        self._lotus_t0 = None
        self._lotus_prev = None  # (batch, handed-off ns) of the batch the loop holds
        self._lotus_got = None  # last batch idx received in this _next_data call
        self._lotus_last = None  # (batch, buffered, pin_start, pin_end) of the batch being returned
        self._lotus_cuda = loader._lotus.cuda_probe() if loader._lotus is not None else None

    def _lotus_epoch_start(self) -> None:
        lt = self._lt
        lt.record(S.EV_EPOCH_START, mono(), 0, S.NO_ID, S.NO_ID, self._num_workers)
        self._lotus_prev = None

    def __next__(self):
        lt = self._lt
        if not lt.on:
            return super().__next__()
        t0 = mono()
        prev = self._lotus_prev
        cuda = self._lotus_cuda
        if prev is not None:
            lt.record(S.EV_STEP, prev[1], t0 - prev[1], prev[0], S.NO_ID, 0)
            self._lotus_prev = None
        if cuda is not None:
            cuda.request()
        self._lotus_last = None
        try:
            data = super().__next__()
        except StopIteration:
            lt.record(S.EV_EPOCH_END, mono(), 0, S.NO_ID, S.NO_ID, 0)
            if cuda is not None:
                cuda.finish()
            lt.flush()
            raise
        t1 = mono()
        last = self._lotus_last
        try:
            if last is not None:
                batch, buffered, p0, p1 = last
                if p0:
                    lt.record(S.EV_PIN, p0, p1 - p0, batch, S.NO_ID, 0)
                lt.record(S.EV_WAIT, t0, t1 - t0, batch, S.NO_ID, S.WAIT_BUFFERED if buffered else 0)
                lt.record(S.EV_CONSUMED, t1, 0, batch, S.NO_ID, 0)
                if cuda is not None:
                    cuda.got(batch)
                self._lotus_prev = (batch, t1)
                lt.maybe_flush(t1)
        except Exception as exc:
            lt.fail("next", exc)
        return data

    def _lotus_unwrap(self, data):
        if type(data) is PinEnvelope:
            return data.data, data.pin_start_ns, data.pin_end_ns
        return data, 0, 0


class TracedSingleProcessIter(_MainSide, compat.SingleProcessIter):
    """num_workers=0: the main process loads, transforms and collates; all of it is recorded."""

    def __init__(self, loader) -> None:
        super().__init__(loader)
        self._lotus_init(loader)
        lt = self._lt
        self._lotus_swap = None
        try:
            rec = lt.recorder()
            iterable = compat.is_iterable_kind(self._dataset_kind)
            proxy = SampleProxy(self._dataset, rec, iterable)
            collate = TimedCollate(self._collate_fn, rec, envelope=bool(self._pin_memory))
            self._dataset_fetcher = compat.create_fetcher(
                self._dataset_kind, proxy, self._auto_collation, collate, self._drop_last)
            self._lotus_swap = TransformSwap(self._dataset, rec)
            self._lotus_rec = rec
            self._lotus_epoch_start()
        except Exception as exc:  # fall back to torch's own fetcher, untraced samples
            lt.fail("iterator", exc)

    def _next_index(self):
        t0 = mono()
        index = super()._next_index()  # StopIteration ends the epoch before any batch is opened
        if self._lotus_active:
            try:
                rec = self._lotus_rec
                batch = self._num_yielded
                rec.epoch = self._lt.epoch
                self._lotus_t0 = rec.begin_batch(batch)
                self._lt.record(S.EV_DISPATCH, t0, self._lotus_t0 - t0, batch, S.NO_ID, -1)
            except Exception as exc:
                self._lt.fail("dispatch", exc)
        return index

    def _next_data(self):
        lt = self._lt
        swap = self._lotus_swap
        self._lotus_active = lt.on and swap is not None
        if not self._lotus_active:
            return self._lotus_unwrap(super()._next_data())[0]
        rec = self._lotus_rec
        self._lotus_t0 = None
        try:
            with swap:
                data = super()._next_data()
        except BaseException as exc:
            t0 = self._lotus_t0
            if t0 is not None:  # a batch was opened: close it (the error is the user's, re-raised)
                if rec.itt is not None:
                    rec.itt.end()
                if not isinstance(exc, StopIteration):
                    rec.rec(S.EV_FETCH, t0, mono() - t0, rec.batch, S.NO_ID, S.FETCH_ERROR)
            raise
        t1 = mono()
        data, p0, p1 = self._lotus_unwrap(data)
        try:
            rec.end_batch(self._lotus_t0, 0, p0 or t1)
            self._lotus_last = (rec.batch, False, p0, p1)
        except Exception as exc:
            lt.fail("fetch", exc)
        return data


class TracedMultiProcessingIter(_MainSide, compat.MultiProcessingIter):
    """num_workers>0: dispatch, arrival, pinning, waits and consumption in the main process."""

    def __init__(self, loader) -> None:
        self._lotus_init(loader)
        super().__init__(loader)  # spawns the workers (through TracingContext) and calls _reset

    def _reset(self, loader, first_iter=False) -> None:
        if self._lt.on:
            try:
                self._lotus_epoch_start()
            except Exception as exc:
                self._lt.fail("reset", exc)
        super()._reset(loader, first_iter)

    def _try_put_index(self) -> None:
        lt = self._lt
        if not lt.on:
            return super()._try_put_index()
        t0 = mono()
        n = self._send_idx
        super()._try_put_index()
        if self._send_idx != n:
            try:
                lt.record(S.EV_DISPATCH, t0, mono() - t0, n, S.NO_ID, self._task_info[n][0])
            except Exception as exc:
                lt.fail("dispatch", exc)
        return None

    def _get_data(self):
        r = super()._get_data()
        if self._lt.on:
            idx = r[0]
            if type(idx) is int:
                self._lotus_got = idx
                try:
                    self._lt.record(S.EV_ARRIVE, mono(), 0, idx, S.NO_ID, 0)
                except Exception as exc:
                    self._lt.fail("arrive", exc)
        return r

    def _next_data(self):
        rcvd = self._rcvd_idx
        self._lotus_got = None
        data = super()._next_data()
        data, p0, p1 = self._lotus_unwrap(data)
        if self._lt.on:
            batch = self._rcvd_idx - 1 if self._rcvd_idx > rcvd else self._lotus_got
            if batch is None:
                batch = S.NO_ID
            self._lotus_last = (batch, self._lotus_got != batch, p0, p1)
        return data


__all__ = ["Recorder", "TracedMultiProcessingIter", "TracedSingleProcessIter"]
