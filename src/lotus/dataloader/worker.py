"""Tracing inside DataLoader worker processes, reached through the public ``multiprocessing_context``.

torch creates each worker with ``multiprocessing_context.Process(target=_worker_loop, args=...)``.
:class:`TracingContext` wraps the context the user chose (or the default) and starts
:func:`worker_entry` instead, which instruments the worker's own copies of the dataset, the
collate_fn and the two queues, then runs torch's unmodified worker loop:

* index queue ``get`` -> ``(idx, indices)``: batch ``idx`` starts (fetch start, ITT task "Batch")
* result queue ``put((idx, data))``: batch ends (``fetch``; ``runq``: the thread's run-queue delay and
  CPU time during it and the bytes it read from storage, :mod:`lotus.dataloader.schedstat`), then the
  ``put`` itself, then a flush

So a worker killed with SIGKILL loses at most the events of the batch it was preparing.
"""

from __future__ import annotations

import multiprocessing.context as mp_context
import os

from lotus._warn import warn_once
from lotus.dataloader import compose
from lotus.dataloader.budget import DetailBudget
from lotus.dataloader.config import WorkerTraceConfig
from lotus.dataloader.recorder import Recorder, make_itt, mono

# imported here, in the main process, so that forked workers inherit them: imported in each worker instead
# (where no bytecode is cached, compiled there), a worker's set-up took 3.8 ms of CPU, 2.3 without them
from lotus.dataloader.schedstat import ThreadIO, ThreadSched
from lotus.dataloader.traced_class import make_faithful  # noqa: F401 - instrument_in_worker's, see above
from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter


class _QueueView:
    """A worker's view of one of torch's multiprocessing queues (everything but get/put delegated)."""

    def __init__(self, q, rec: Recorder, state: dict):
        self._q = q
        self._rec = rec
        self._state = state  # shared by the two views of a worker: start time of the batch in progress

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_q", "_rec", "_state"):
            raise AttributeError(name)
        return getattr(self._q, name)


class _IndexQueue(_QueueView):
    """The worker's view of its index queue: marks where each batch starts."""

    def get(self, *args, **kwargs):
        r = self._q.get(*args, **kwargs)
        rec = self._rec
        if rec.on:
            try:
                if type(r) is tuple and len(r) == 2 and type(r[0]) is int:
                    state = self._state
                    state["t0"] = rec.begin_batch(r[0])
                    sched = state.get("sched")
                    if sched is not None:
                        state["q0"] = sched.read()
                    detail = rec.detail
                    if detail and not state.get("patched"):
                        compose.patch_classes()  # timed Composes for this detail batch only
                        state["patched"] = True
                    classes = state.get("classes")
                    if classes is not None:  # timed items for a detail batch, the user's class otherwise
                        want = classes[2] if detail else classes[1]
                        if type(classes[0]) is not want:
                            classes[0].__class__ = want
                elif r is not None and type(r).__name__ == "_ResumeIteration":
                    rec.epoch += 1  # persistent workers: the main process started a new epoch
            except Exception as exc:
                rec.fail("index queue", exc)
        return r


class _ResultQueue(_QueueView):
    """The worker's view of the result queue: marks where each batch ends, then flushes."""

    def _disk_bytes(self) -> int:
        """Bytes this thread read from storage since the previous batch's end (its start: a worker's thread
        reads nothing from a disk between batches but its indices), -1 where Linux does not say."""
        io = self._state.get("io")
        now = io.read() if io is not None else None
        if now is None:
            return S.NO_ID
        last, self._state["io_last"] = self._state.get("io_last", now), now
        return max(now - last, 0)

    def put(self, obj, *args, **kwargs):
        rec = self._rec
        if not rec.on or type(obj) is not tuple or len(obj) != 2 or type(obj[0]) is not int:
            return self._q.put(obj, *args, **kwargs)
        t0 = self._state.pop("t0", None)
        t1 = mono()
        sched = self._state.get("sched")
        q1 = sched.read() if sched is not None else None
        q0 = self._state.pop("q0", None)
        if self._state.pop("patched", False):
            compose.unpatch_classes()
        try:
            if t0 is not None:
                kind = type(obj[1]).__name__
                if kind == "_IterableDatasetStopIteration":  # no data: not a batch
                    rec.end_batch(t0, 0, t1, S.EV_EXHAUSTED)
                else:
                    rec.end_batch(t0, S.FETCH_ERROR if kind == "ExceptionWrapper" else 0, t1)
                    if q0 is not None and q1 is not None:  # the scheduler's view of this fetch
                        rec.rec(S.EV_RUNQ, t0, q1[1] - q0[1], obj[0], self._disk_bytes(), q1[0] - q0[0])
        except Exception as exc:
            rec.fail("result queue", exc)
        out = self._q.put(obj, *args, **kwargs)
        if rec.on:
            try:
                rec.rec(S.EV_PUT, t1, mono() - t1, obj[0], S.NO_ID, 0)
                rec.w.flush()
                rec.on = rec.w.ok
            except Exception as exc:
                rec.fail("flush", exc)
        return out


def _instrument(cfg: WorkerTraceConfig, args: tuple) -> tuple[tuple, Recorder | None]:
    from lotus.dataloader import _torch_compat as compat
    from lotus.dataloader.instrument import TimedCollate, instrument_in_worker

    worker_id = int(compat.worker_arg(args, "worker_id"))
    writer = TraceWriter(cfg.trace_dir, "worker", rank=cfg.rank, world_size=cfg.world_size, worker_id=worker_id,
                         extra={"main_pid": cfg.main_pid,
                                "detail_budget_pct": None if cfg.detail_budget is None else cfg.detail_budget * 100})
    if not writer.ok:
        return args, None
    rec = Recorder(writer, cfg.loader, cfg.epoch, make_itt(cfg.itt), worker_id=worker_id,
                   budget=DetailBudget(cfg.detail_budget))
    rec.rec(S.EV_WORKER_START, mono(), 0, S.NO_ID, S.NO_ID, worker_id)
    # this (the worker's main) thread: the one that runs torch's loop
    state: dict = {"sched": ThreadSched(), "io": ThreadIO()}
    if state["sched"].fd < 0:
        del state["sched"]
    if state["io"].fd < 0:
        del state["io"]
    else:
        state["io_last"] = state["io"].read()
    new = {
        "index_queue": _IndexQueue(compat.worker_arg(args, "index_queue"), rec, state),
        "data_queue": _ResultQueue(compat.worker_arg(args, "data_queue"), rec, state),
        "collate_fn": TimedCollate(compat.worker_arg(args, "collate_fn"), rec, cfg.envelope),
    }
    compose.reset_after_fork()
    # every Compose this worker runs in a detail batch is timed, wherever it lives (patched per detail batch)
    compose.open_window(rec, patch=False)
    dataset = compat.dataset_from_worker_args(args)
    if dataset is not None:
        iterable = compat.is_iterable_kind(compat.worker_arg(args, "dataset_kind"))
        cls = type(dataset)
        try:
            if instrument_in_worker(dataset, rec, iterable) and not iterable and type(dataset) is not cls:
                # map-style: the timed subclass only for detail batches; the others call the user's class
                state["classes"] = (dataset, cls, type(dataset))
        except Exception as exc:  # the dataset stays as it is; batch events still come
            if type(dataset) is not cls:
                dataset.__class__ = cls
            warn_once("instrument", f"lotus: per-sample timing off in workers ({exc!r})")
        new["dataset"] = dataset
    return compat.replace_worker_args(args, **new), rec


def worker_entry(cfg: WorkerTraceConfig, target, *args, **kwargs):
    """Process target of a traced worker: instrument, run torch's worker loop, flush."""
    rec = None
    try:
        args, rec = _instrument(cfg, args)
    except Exception as exc:
        warn_once("worker", f"lotus: worker {os.getpid()} runs untraced ({exc!r})")
    try:
        return target(*args, **kwargs)
    finally:
        if rec is not None:
            try:
                if rec.on:
                    rec.rec(S.EV_WORKER_END, mono(), 0, S.NO_ID, S.NO_ID, rec.worker_id)
                rec.w.close()
            except Exception:
                pass


def _prepare(args: tuple) -> None:
    """In the main process, before a worker forks: what its set-up can inherit instead of making (the dataset's
    traced class: lotus.dataloader.instrument.prepare_in_parent). Never raises: the worker makes it otherwise."""
    try:
        from lotus.dataloader import _torch_compat as compat
        from lotus.dataloader.instrument import prepare_in_parent

        dataset = compat.dataset_from_worker_args(args)
        if dataset is not None:
            prepare_in_parent(dataset, compat.is_iterable_kind(compat.worker_arg(args, "dataset_kind")))
    except Exception:
        pass


class TracingContext(mp_context.BaseContext):
    """A multiprocessing context that starts DataLoader workers through :func:`worker_entry`.

    Everything else (queues, events, start method) is the wrapped context's.
    """

    def __init__(self, inner: mp_context.BaseContext, make_config):
        self._inner = inner
        self._make_config = make_config

    def get_context(self, method=None):
        return self._inner.get_context(method)

    def get_start_method(self, allow_none=False):
        return self._inner.get_start_method(allow_none)

    def Process(self, *args, **kwargs):
        from lotus.dataloader import _torch_compat as compat

        target = kwargs.get("target")
        if target is compat.worker_loop and not args:
            try:
                cfg = self._make_config()
            except Exception as exc:
                cfg = None
                warn_once("context", f"lotus: workers run untraced ({exc!r})")
            if cfg is not None:
                _prepare(kwargs.get("args", ()))
                kwargs["args"] = (cfg, target, *kwargs.get("args", ()))
                kwargs["target"] = worker_entry
        return self._inner.Process(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_inner", "_make_config"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"TracingContext({self._inner!r})"
