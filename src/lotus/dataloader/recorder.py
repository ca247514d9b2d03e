"""The recorder: what instrumented datasets, transforms and collate functions write through.

One :class:`Recorder` per traced iterator in the main process (num_workers=0) and one per worker
process. Its methods are the hot path: two clock reads and a 48-byte append per event, no I/O.
Failures inside the recorder switch it off with one warning (``on = False``) and never propagate.
"""

from __future__ import annotations

import time

from lotus._warn import warn_once
from lotus.dataloader.budget import DetailBudget
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter

mono = time.monotonic_ns


class Itt:
    """ITT tasks in domain ``lotus`` (VTune). Built only when ITT is enabled: no ittapi call otherwise."""

    def __init__(self) -> None:
        from ittapi import native

        self._native = native
        self.domain = native.Domain("lotus")
        self._handles: dict[str, object] = {}
        self._begin = native.task_begin
        self._end = native.task_end

    def handle(self, name: str):
        h = self._handles.get(name)
        if h is None:
            h = self._handles[name] = self._native.StringHandle(name)
        return h

    def begin(self, handle) -> None:
        self._begin(self.domain, handle)

    def end(self) -> None:
        self._end(self.domain)


def make_itt(enabled: bool) -> Itt | None:
    if not enabled:
        return None
    try:
        return Itt()
    except Exception as exc:
        warn_once("itt", f"lotus: ITT tasks disabled (ittapi unavailable: {exc})")
        return None


class Recorder:
    """Per-process (worker) or per-iterator (main, num_workers=0) event recorder.

    ``batch`` is the batch being prepared; ``sample`` the dataset index being loaded;
    ``tf_start``/``tf_end`` the span of the current sample's transforms (0 when none ran yet);
    ``depth``/``nrec`` let nested ops attribute time to the innermost op once.
    """

    __slots__ = ("batch", "budget", "c0", "c1", "cn", "compose_ids", "depth", "detail", "epoch", "f0", "h_batch",
                 "h_collate", "h_load", "in_sample", "itt", "loader", "nrec", "nsamp", "on", "sample", "tf_end",
                 "tf_start", "w", "worker_id")

    def __init__(self, writer: TraceWriter, loader: int, epoch: int, itt: Itt | None, worker_id: int = -1,
                 budget: DetailBudget | None = None):
        self.w = writer
        self.loader = loader
        self.epoch = epoch
        self.batch = S.NO_ID
        self.sample = S.NO_ID
        self.tf_start = 0
        self.tf_end = 0
        self.in_sample = False
        self.c0 = self.c1 = self.cn = 0  # the batch's collation (start, end, items): written with its fetch
        self.f0 = 0  # num_workers=0's fast path: the batch's fetch start (its dispatch end)
        self.depth = 0  # Compose loops in progress (lotus.dataloader.compose)
        self.nrec = 0  # op events recorded so far: an op that saw this change records nothing itself
        self.nsamp = 0  # per-sample records so far (the budget's cost estimate)
        self.compose_ids: dict = {}  # id(ops list) -> (ops, event ids, ITT handles, list)
        self.worker_id = worker_id
        self.itt = itt
        self.on = writer.ok
        # per-sample/per-op records for the batch in progress (decided at its start by the budget)
        self.budget = budget if budget is not None else DetailBudget(None)
        self.detail = self.on
        if itt is not None:
            self.h_batch = itt.handle("Batch")
            self.h_load = itt.handle("Loader")
            self.h_collate = itt.handle("Collation")
        else:
            self.h_batch = self.h_load = self.h_collate = None

    # -- the hot path -----------------------------------------------------------------------
    def rec(self, name_id: int, start_ns: int, dur_ns: int, batch: int, sample: int, arg: int) -> None:
        w = self.w
        w.buf += w.pack(name_id, self.loader, self.epoch, start_ns, dur_ns, batch, sample, arg)

    def end_sample(self, t0: int, t1: int, sample: int) -> None:
        """The ``sample`` record of the item that ran from ``t0`` to ``t1`` (``arg``: its load time, up to its
        first transform at ``tf_start``; -1 when no transform ran)."""
        tf0 = self.tf_start
        w = self.w
        w.buf += w.pack(S.EV_SAMPLE, self.loader, self.epoch, t0, t1 - t0, self.batch, sample,
                        tf0 - t0 if tf0 else S.NO_ID)
        self.nsamp += 1
        self.sample = S.NO_ID

    def fail(self, where: str, exc: BaseException) -> None:
        """Switch recording off for good in this process; training continues."""
        self.on = False
        self.detail = False
        self.c0 = 0
        self.w.buf = bytearray()
        warn_once(f"recorder:{where}", f"lotus: tracing stopped in this process ({where}: {exc!r}); "
                  "training continues untraced")

    def name_id(self, name: str) -> int:
        return self.w.name_id(name)

    # -- batch boundaries ---------------------------------------------------------------------
    def choose_detail(self) -> bool:
        """Decide (once per batch, before it starts) whether it records per-sample/per-op detail."""
        self.detail = d = self.on and self.budget.step(self.epoch, self.nrec, self.nsamp)
        return d

    def begin_batch(self, batch: int, choose: bool = True) -> int:
        self.batch = batch
        self.c0 = 0
        if choose:
            self.choose_detail()
        t = mono()
        if self.itt is not None:
            self.itt.begin(self.h_batch)
        return t

    def end_batch(self, start_ns: int, flags: int = 0, end_ns: int | None = None, kind: int = S.EV_FETCH) -> int:
        t = end_ns or mono()
        if self.itt is not None:
            self.itt.end()
        if self.detail:
            flags |= S.FETCH_DETAIL
        w = self.w
        c0 = self.c0
        if c0:  # collate, then fetch: one append (c0 is reset when the next batch begins)
            w.buf += S.PACK2(S.EV_COLLATE, self.loader, self.epoch, c0, self.c1 - c0, self.batch, S.NO_ID, self.cn,
                             kind, self.loader, self.epoch, start_ns, t - start_ns, self.batch, S.NO_ID, flags)
        else:
            w.buf += w.pack(kind, self.loader, self.epoch, start_ns, t - start_ns, self.batch, S.NO_ID, flags)
        if kind == S.EV_FETCH:
            budget = self.budget  # accounted by the next batch's step()
            budget.prep_ns += t - start_ns
            budget.prep_n += 1
        return t
