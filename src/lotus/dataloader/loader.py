"""``lotus.dataloader.DataLoader``: torch's DataLoader, traced when asked to.

Drop-in: same arguments and behaviour as the installed ``torch.utils.data.DataLoader`` (it *is* one,
by subclassing). Tracing is on when ``trace_dir=`` is given or ``$LOTUS_TRACE_DIR`` is set; without
either, every method is torch's own and lotus adds nothing to the data path.
"""

from __future__ import annotations

import inspect
from typing import TypeVar

import torch.utils.data

from lotus._warn import warn_once
from lotus.dataloader import overrides
from lotus.dataloader.budget import budget_fraction
from lotus.dataloader.config import (
    resolve_itt,
    resolve_telemetry,
    resolve_trace_dir,
    sinks_requested,
)
from lotus.dataloader.loadertrace import LoaderTrace
from lotus.dataloader.policy import Policy, resolve_policy

TorchDataLoader = torch.utils.data.DataLoader
_INIT_SIGNATURE = inspect.signature(TorchDataLoader.__init__)
T_co = TypeVar("T_co", covariant=True)


class DataLoader(TorchDataLoader[T_co]):  # generic like torch's: DataLoader[int] in annotations
    """torch.utils.data.DataLoader, plus lotus tracing.

    Lotus-only keywords (everything else is torch's, passed through unchanged):

    trace_dir: directory for trace files; tracing is on when given (or when $LOTUS_TRACE_DIR is set).
    itt: open an ITT task per op/load/collate/batch for Intel VTune (default: $LOTUS_ITT).
    trace_name: a name for this loader in the trace (e.g. "train", "val").
    worker_assignment: "round_robin" (torch) or "free_worker" (see lotus.dataloader.policy).
    delivery_order: "in_order" (torch), "lowest_ready_first" or "arrival" (torch's in_order=False).
    gpu_telemetry: sample NVML GPU utilisation/clocks/power/energy into the trace (default:
        $LOTUS_GPU_TELEMETRY); needs nvidia-ml-py and CUDA.
    trace_detail: "budget" (default, or $LOTUS_DETAIL): per-sample/per-op records for a share of whole
        batches chosen so that the tracer's CPU stays within ``trace_budget_pct`` of the pipeline's;
        "full": for every batch (see docs/overhead.md for its cost). Batch records are always exact.
    trace_budget_pct: that budget in percent (> 0; default 0.5, or $LOTUS_DETAIL_BUDGET_PCT).
    live_sinks: live metrics from a sidecar process that follows the trace: a dict such as
        ``{"tensorboard": "runs/", "prometheus": 9108, "wandb": True}`` (or lotus.live.sinks.SinkOptions;
        default: $LOTUS_TENSORBOARD, $LOTUS_PROMETHEUS, $LOTUS_WANDB). Started once per trace directory by
        rank 0; see docs/live-sinks.md.
    """

    def __init__(self, *args, trace_dir=None, itt=None, trace_name=None, worker_assignment=None,
                 delivery_order=None, gpu_telemetry=None, trace_detail=None, trace_budget_pct=None, live_sinks=None,
                 **kwargs):
        self._lotus = None
        self._lotus_wrapping = False
        self._lotus_policy = Policy()
        self._lotus_requested_workers = None
        self._lotus_auto = None
        self._lotus_budget = None
        if trace_detail is not None or trace_budget_pct is not None or resolve_trace_dir(trace_dir) is not None:
            self._lotus_budget = budget_fraction(trace_detail, trace_budget_pct)  # ValueError on a bad value
        auto_cpus = None
        if "auto" in args or kwargs.get("num_workers") == "auto":
            from lotus.dataloader.auto import cpus_available, first_count

            auto_cpus = cpus_available()
            args, kwargs, wants_auto = _take_auto(args, kwargs, lambda: first_count(auto_cpus))
        else:
            wants_auto = False
        self._lotus_overrides = overrides.from_env()
        if wants_auto and "num_workers" in self._lotus_overrides:
            wants_auto = False  # lotus run --workers N decides
        self._lotus_requested = {}
        if self._lotus_overrides:
            args, kwargs, self._lotus_requested = overrides.apply(_INIT_SIGNATURE, args, kwargs,
                                                                   self._lotus_overrides)
            self._lotus_requested_workers = self._lotus_requested.get("num_workers")
        if worker_assignment is not None or delivery_order is not None:
            workers = _num_workers_of(args, kwargs)
            self._lotus_policy, in_order = resolve_policy(worker_assignment, delivery_order,
                                                          kwargs.get("in_order"), workers)
            if in_order is not None:
                kwargs["in_order"] = in_order
        super().__init__(*args, **kwargs)
        if wants_auto:
            from lotus.dataloader.auto import AutoWorkers

            self._lotus_auto = AutoWorkers(self, auto_cpus)
        directory = resolve_trace_dir(trace_dir)
        if directory is None:
            if live_sinks is not None:
                warn_once("live-sinks-untraced", "lotus: live_sinks= publishes from the trace: give trace_dir= "
                          "(or $LOTUS_TRACE_DIR); no live metrics")
            return
        from lotus.dataloader import _torch_compat as compat

        problem = compat.check()
        if problem:
            warn_once("compat", f"lotus: tracing disabled: {problem}")
            return
        try:
            lt = LoaderTrace(self, directory, resolve_itt(itt), trace_name, resolve_telemetry(gpu_telemetry),
                             self._lotus_budget)
        except Exception as exc:
            warn_once("loader-init", f"lotus: tracing disabled for a DataLoader ({exc!r})")
            return
        if lt.on:
            self._lotus = lt
            if lt.rank == 0 and sinks_requested(live_sinks):
                _start_sinks(directory, live_sinks)

    # The user's multiprocessing_context stays what they set; torch's iterator sees a tracing
    # wrapper of it only while it creates worker processes (see _get_iterator).
    @property
    def multiprocessing_context(self):
        ctx = TorchDataLoader.multiprocessing_context.fget(self)
        if self._lotus_wrapping:
            import multiprocessing

            from lotus.dataloader.worker import TracingContext

            lt = self._lotus
            return TracingContext(ctx if ctx is not None else multiprocessing.get_context(),
                                  lambda: lt.worker_config(self))
        return ctx

    @multiprocessing_context.setter
    def multiprocessing_context(self, value) -> None:
        TorchDataLoader.multiprocessing_context.fset(self, value)

    def __iter__(self):
        lt = self._lotus
        if lt is not None:
            lt.epoch += 1
        if self._lotus_auto is not None:
            self._lotus_auto.before_epoch(self, lt)
        return super().__iter__()

    def _get_iterator(self):
        lt = self._lotus
        if (lt is None or not lt.on) and self._lotus_policy.default:
            return super()._get_iterator()
        from lotus.dataloader.iterators import TracedMultiProcessingIter, TracedSingleProcessIter

        if self.num_workers == 0:
            if lt is not None and lt.on and not (lt.itt or self.pin_memory or lt.stop_after is not None
                                                 or lt.replay_batches):
                from lotus.dataloader.fastpath import FastSingleProcessIter

                return FastSingleProcessIter(self)  # a plain traced loop: the same records, less Python
            return TracedSingleProcessIter(self)
        from lotus.dataloader import _torch_compat as compat

        compat.check_worker_number(self)  # torch's warning, from torch's own call site (shown as often)
        self._lotus_wrapping = lt is not None and lt.on
        try:
            return TracedMultiProcessingIter(self)
        finally:
            self._lotus_wrapping = False

    @property
    def trace_dir(self) -> str | None:
        """Where this loader writes its trace (None when tracing is off)."""
        return self._lotus.trace_dir if self._lotus is not None else None


def _start_sinks(trace_dir: str, live_sinks) -> None:
    """The live metrics sidecar of this trace directory (lotus.live.sinks); a bad value warns once."""
    from lotus.live.sinks.options import SinkOptions, from_env
    from lotus.live.sinks.spawn import ensure_for_loader

    try:
        options = SinkOptions.coerce(live_sinks) if live_sinks is not None else from_env()
    except (TypeError, ValueError) as exc:
        warn_once("live-sinks", f"lotus: no live metrics ({exc}); training continues")
        return
    if options is not None:
        ensure_for_loader(trace_dir, options)


def _take_auto(args: tuple, kwargs: dict, count) -> tuple[tuple, dict, bool]:
    """``num_workers="auto"`` (keyword or positional) replaced by ``count()`` for torch never to see it."""
    from lotus.dataloader.auto import AUTO

    if kwargs.get("num_workers") == AUTO:
        return args, {**kwargs, "num_workers": count()}, True
    i = list(_INIT_SIGNATURE.parameters)[1:].index("num_workers")
    if i < len(args) and args[i] == AUTO:
        return (*args[:i], count(), *args[i + 1:]), kwargs, True
    return args, kwargs, False


def _num_workers_of(args: tuple, kwargs: dict) -> int:
    if "num_workers" in kwargs:
        return int(kwargs["num_workers"])
    params = list(inspect.signature(TorchDataLoader.__init__).parameters)[1:]
    i = params.index("num_workers") if "num_workers" in params else -1
    return int(args[i]) if 0 <= i < len(args) else 0


def _signature() -> inspect.Signature:
    base = inspect.signature(TorchDataLoader.__init__)
    params = list(base.parameters.values())
    extra = [
        inspect.Parameter("trace_dir", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("itt", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("trace_name", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("worker_assignment", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("delivery_order", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("gpu_telemetry", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("trace_detail", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("trace_budget_pct", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("live_sinks", inspect.Parameter.KEYWORD_ONLY, default=None),
    ]
    if not any(p.kind == inspect.Parameter.KEYWORD_ONLY for p in params) and params[-1].kind in (
        inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        return base
    return base.replace(parameters=params + extra)


try:
    DataLoader.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
except (ValueError, TypeError):  # pragma: no cover - exotic torch signature
    pass
