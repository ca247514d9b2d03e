"""The main-process side shared by both traced iterators (:mod:`lotus.dataloader.iterators`).

``_MainSide.__next__`` wraps torch's: the loop's ``wait`` for each batch, its hand-off (``consumed``), the
previous batch's ``step``, CUDA events, probe mode (``lotus run --steps``), replay mode (``LOTUS_REPLAY``);
and the end of an epoch, however it ends (exhausted, abandoned, probe end), flushed at once.
"""

from __future__ import annotations

import time
import weakref

from lotus.dataloader import _torch_compat as compat
from lotus.dataloader import compose
from lotus.dataloader import gpu as _gpu
from lotus.dataloader.envelope import PinEnvelope
from lotus.dataloader.gpu import set_active
from lotus.dataloader.instrument import _PACK2, _PACK3
from lotus.dataloader.policy import Policy
from lotus.dataloader.recorder import mono
from lotus.trace import schema as S

# the hot path's record kinds as module constants (one cached global load each)
_STEP, _WAIT, _CONSUMED, _NO_ID, _BUFFERED = S.EV_STEP, S.EV_WAIT, S.EV_CONSUMED, S.NO_ID, S.WAIT_BUFFERED
_MAIN_BATCH, _MAIN_LOOP, _NO_PREV, _ITEMS = S.EV_MAIN_BATCH, S.EV_MAIN_LOOP, (S.NO_ID, 0), S.MAIN_ITEMS_SHIFT


_PACK2_HEADED, _HEADER, _DETAIL_FLAG = S.PACK2_HEADED, S.HEADER.pack, S.FETCH_DETAIL
_heads: dict = {}


def main_heads(loader: int, epoch: int) -> tuple[bytes, bytes]:
    """The two 8-byte headers of a num_workers=0 batch's packed pair (schema.EV_MAIN_BATCH, EV_MAIN_LOOP)."""
    h = _heads.get((loader, epoch))
    if h is None:
        if len(_heads) > 4096:
            _heads.clear()
        h = _heads[(loader, epoch)] = (_HEADER(_MAIN_BATCH, loader, epoch), _HEADER(_MAIN_LOOP, loader, epoch))
    return h


def main_pair(heads: tuple[bytes, bytes], batch: int, d0: int, f0: int, c0: int, cn: int, end: int, w0: int,
              t1: int, pb: int, pt: int, detail: bool) -> bytes:
    """A num_workers=0 batch as its packed pair (docs/trace-format.md "Packed records"): dispatch from
    ``d0``, fetch from ``f0`` to ``end``, collation from ``c0`` of ``cn`` items (``c0`` 0: none), the
    loop's wait ``w0``..``t1``, and the batch it held before (``pb``, handed off at ``pt``). The one
    writer of that pair, for both num_workers=0 iterators."""
    if c0:
        coll = c0 - d0
        flags = (cn + 1) << _ITEMS
    else:
        coll = -1
        flags = 0
    if detail:
        flags |= _DETAIL_FLAG
    return _PACK2_HEADED(heads[0], d0, end - d0, batch, f0 - d0, coll, heads[1], w0, t1 - w0, pb, pt, flags)


class NullTrace:
    """Stands in for a LoaderTrace when a loader runs policies without tracing."""

    on = False
    epoch = 0
    stop_after = None
    replay_batches = 0

    def record(self, *args) -> None:
        pass

    def cuda_probe(self):
        return None


_NULL = NullTrace()


class _MainSide:
    """State and recording shared by both iterators (mixin; torch's class comes second in the MRO)."""

    def _lotus_init(self, loader) -> None:
        self._lt = loader._lotus if loader._lotus is not None else _NULL
        self._lotus_loader = weakref.ref(loader)  # a probe series gives the loader its next probe's settings
        self._lotus_policy: Policy = loader._lotus_policy
        self._lotus_active = False
        self._lotus_t0 = None
        self._lotus_prev = None  # (batch, handed-off ns) of the batch the loop holds
        self._lotus_open = False  # an epoch started and its end is not recorded yet
        self._lotus_patched = False  # this iterator holds a patch_classes() of lotus.dataloader.compose
        self._lotus_last = None  # (batch, buffered, pin_start, pin_end) of the batch being returned
        self._lotus_cuda = self._lt.cuda_probe() if self._lt.on else None
        self._lotus_replay = None
        self._lotus_sched = None  # lotus.dataloader.schedstat.ThreadSched of the loop's thread, when first needed
        if self._lt.on and self._lt.replay_batches:
            from lotus.dataloader.replay import Replay

            try:
                epoch_len = len(loader)
            except TypeError:
                epoch_len = None
            self._lotus_replay = Replay(self._lt.replay_batches, epoch_len)

    def _lotus_epoch_start(self) -> None:
        lt = self._lt
        lt.record(S.EV_EPOCH_START, mono(), 0, S.NO_ID, S.NO_ID, self._num_workers)
        self._lotus_prev = None
        self._lotus_open = True

    def _lotus_epoch_end(self, how: int) -> None:
        """Record the end of the epoch (exhausted, abandoned, probe end) and write everything out."""
        lt = self._lt
        if self._lotus_patched:
            self._lotus_patched = False
            compose.unpatch_classes()
        if not lt.on:
            return
        if self._lotus_open:
            self._lotus_open = False
            lt.record(S.EV_EPOCH_END, mono(), 0, S.NO_ID, S.NO_ID, how)
            if self._lotus_cuda is not None:
                self._lotus_cuda.finish()
            replay = self._lotus_replay
            if replay is not None and replay.served and how == S.EPOCH_EXHAUSTED:
                replay.served = 0  # the next epoch (persistent workers) prepares and replays anew
                replay.cache.clear()
                if not getattr(self, "_persistent_workers", False):
                    compat.shutdown_workers(self)  # the workers' prefetched batches were never needed
        lt.flush()

    def __del__(self):
        # A loop that broke early, a dropped iterator, a deleted loader: the trace is written now.
        try:
            if self._lt.on or self._lotus_patched:
                self._lotus_epoch_end(S.EPOCH_ABANDONED)
        except Exception:
            pass
        parent = getattr(super(), "__del__", None)
        if parent is not None:
            parent()

    def __next__(self):
        lt = self._lt
        if lt.stop_after is not None:
            why = "steps" if lt.consumed >= lt.stop_after else None
            if why is None and lt.stop_rule is not None and lt.on:
                why = lt.stop_rule.check(lt.consumed, self._lotus_prev, self._num_workers, lt.prefetch_factor,
                                         lt.epoch)
            if why is not None:
                from lotus.dataloader.probe import end_job
                from lotus.dataloader.series import control_dir, next_probe

                if lt.on:
                    self._lotus_step_done(mono())  # the last batch's step is complete: the loop asks again
                series = control_dir()
                if series is None:
                    end_job(lt, self, why)  # raises SystemExit(0)
                next_probe(lt, self, why, series)  # this iterator is now the next probe's (or SystemExit)
                return self.__next__()
            if not lt.on:
                data = super().__next__()
                lt.consumed += 1
                return data
        if not lt.on:
            return super().__next__()
        t0 = mono()
        cuda = self._lotus_cuda
        if cuda is not None:  # CUDA is available: events once it is initialised (lotus.dataloader.gpu)
            if cuda.wanted:
                self._lotus_request(cuda)
            else:
                cuda = None
        self._lotus_last = None
        try:
            replay = self._lotus_replay
            if replay is not None and replay.ready:
                data, batch = replay.next()
                self._num_yielded += 1
                self._lotus_last = (batch, True, 0, 0)
            else:
                data = super().__next__()
                if replay is not None:
                    replay.keep(data, getattr(self, "_send_idx", self._num_yielded))
        except BaseException as exc:
            self._lotus_next_failed(t0, exc)
            raise
        self._lotus_after(lt, t0, mono(), cuda)
        return data

    def _lotus_request(self, cuda) -> None:
        """The loop asks for a batch: the CUDA event before its wait (lotus.dataloader.gpu)."""
        try:
            cuda.request()
        except Exception as exc:
            self._lt.fail("request", exc)

    def _lotus_next_failed(self, t0: int, exc: BaseException) -> None:
        """next() raised: the epoch ended (StopIteration) or the loop is probably about to die."""
        lt = self._lt
        if isinstance(exc, StopIteration):
            try:
                self._lotus_step_done(t0)
                self._lotus_epoch_end(S.EPOCH_EXHAUSTED)
            except Exception as err:
                lt.fail("epoch end", err)
            return
        try:
            self._lotus_step_done(t0)
            lt.flush()  # keep what was recorded
        except Exception:
            pass

    def _lotus_after(self, lt, t0: int, t1: int, cuda) -> None:
        """The records of the hand-off that next() (asked at ``t0``) made at ``t1``."""
        last = self._lotus_last
        try:
            if last is None:
                self._lotus_step_done(t0)
                return
            w = lt.w
            lo, ep = lt.loader_id, lt.epoch
            prev = self._lotus_prev
            if len(last) == 7:  # num_workers=0: the whole batch in one packed pair (schema.EV_MAIN_BATCH)
                batch, d0, f0, c0, cn, end, detail = last
                pb, pt = prev if prev is not None else _NO_PREV
                w.buf += main_pair(main_heads(lo, ep), batch, d0, f0, c0, cn, end, t0, t1, pb, pt, detail)
                p0 = None
            else:
                batch, buffered, p0, p1 = last
                # the previous batch's step (hand-off -> this request), this wait and this hand-off: one append
                if prev is not None:
                    w.buf += _PACK3(_STEP, lo, ep, prev[1], t0 - prev[1], prev[0], _NO_ID, 0,
                                    _WAIT, lo, ep, t0, t1 - t0, batch, _NO_ID, _BUFFERED if buffered else 0,
                                    _CONSUMED, lo, ep, t1, 0, batch, _NO_ID, 0)
                else:
                    w.buf += _PACK2(_WAIT, lo, ep, t0, t1 - t0, batch, _NO_ID, _BUFFERED if buffered else 0,
                                    _CONSUMED, lo, ep, t1, 0, batch, _NO_ID, 0)
            if p0:
                lt.record(S.EV_PIN, p0, p1 - p0, batch, S.NO_ID, 0)
            if cuda is not None:
                cuda.got(batch)
            self._lotus_prev = (batch, t1)
            lt.last_batch = batch
            if p0 is not None and lt.consumed % S.MAIN_CPU_EVERY == 0:  # workers (what the model reads it for)
                self._lotus_main_cpu(lt, batch)
            lt.consumed += 1
            if _gpu._active_id != id(lt):  # (reset when the active one is collected)
                set_active(lt)
            if len(w.buf) >= w.flush_bytes:  # by time: the flusher thread (lotus.trace.writer)
                lt.flush()
        except Exception as exc:
            lt.fail("next", exc)

    def _lotus_main_cpu(self, lt, batch: int) -> None:
        """The main process's CPU so far (all threads) and the loop thread's run-queue delay (``main_cpu``)."""
        sched = self._lotus_sched
        if sched is None:
            from lotus.dataloader.schedstat import ThreadSched

            sched = self._lotus_sched = ThreadSched()  # the loop's thread: the one calling next()
        q = sched.read()
        lt.record(S.EV_MAIN_CPU, mono(), 0, batch, q[1] if q is not None else S.NO_ID, time.process_time_ns())

    def _lotus_step_done(self, t0: int) -> None:
        """Record the step of the batch the loop held (when no new hand-off follows)."""
        prev = self._lotus_prev
        if prev is not None:
            self._lotus_prev = None
            self._lt.record(S.EV_STEP, prev[1], t0 - prev[1], prev[0], S.NO_ID, 0)

    def _lotus_unwrap(self, data):
        if type(data) is PinEnvelope:
            return data.data, data.pin_start_ns, data.pin_end_ns
        return data, 0, 0
