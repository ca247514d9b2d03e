"""The tracing state of one traced DataLoader in the main process (:class:`LoaderTrace`).

Its trace writer and loader id, the per-batch record calls of the iterators, the recorder and worker
configuration handed to worker processes, the CUDA probe and GPU telemetry, and failure handling (a
tracer that fails warns once and turns itself off; training goes on). Made by
:class:`lotus.dataloader.loader.DataLoader` when tracing is on.
"""

from __future__ import annotations

import os
import weakref

import torch.utils.data

from lotus._warn import warn_once
from lotus.dataloader.budget import DetailBudget
from lotus.dataloader.config import (
    DATASET_FILES_ENV,
    WorkerTraceConfig,
    distributed_rank,
    env_flag,
    next_loader_id,
    replay_batches,
    steps_limit,
    stop_rule,
)
from lotus.dataloader.recorder import Recorder, make_itt
from lotus.trace import schema as S
from lotus.trace.writer import main_writer

TorchDataLoader = torch.utils.data.DataLoader


def _describe(loader: TorchDataLoader, name: str | None) -> dict:
    ds = loader.dataset
    try:
        length = len(ds)  # type: ignore[arg-type]
    except Exception:
        length = None
    ctx = TorchDataLoader.multiprocessing_context.fget(loader)
    return {
        "name": name,
        "dataset": type(ds).__qualname__,
        "dataset_len": length,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "in_order": getattr(loader, "in_order", True),
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "sampler": type(loader.sampler).__qualname__,
        "batch_sampler": type(loader.batch_sampler).__qualname__ if loader.batch_sampler is not None else None,
        "collate_fn": getattr(loader.collate_fn, "__qualname__", type(loader.collate_fn).__qualname__),
        "start_method": ctx.get_start_method() if ctx is not None and not isinstance(ctx, str) else None,
        "worker_assignment": getattr(loader, "_lotus_policy", None) and loader._lotus_policy.assignment,
        "delivery_order": getattr(loader, "_lotus_policy", None) and loader._lotus_policy.delivery,
        "pid": os.getpid(),
        "num_workers_requested": getattr(loader, "_lotus_requested_workers", None),
        "overrides": getattr(loader, "_lotus_overrides", None) or None,
        "requested": getattr(loader, "_lotus_requested", None) or None,
        "cpus_available": _cpus_available(),
        "replay_batches": replay_batches() or None,
        "detail": "full" if getattr(loader, "_lotus_budget", None) is None else "budget",
        "detail_budget_pct": None if getattr(loader, "_lotus_budget", None) is None else loader._lotus_budget * 100,
    }


def _cpus_available() -> int:
    from lotus._cpus import count

    return count()


class LoaderTrace:
    """Main-process tracing state of one DataLoader: its id, current epoch, and the process writer."""

    def __init__(self, loader: TorchDataLoader, trace_dir: str, itt: bool, name: str | None,
                 telemetry: bool = False, budget: float | None = None, loader_id: int | None = None):
        self.name = name
        self.segment = 0  # the probe of a series this trace belongs to (lotus.dataloader.series)
        self.budget = budget  # detail budget, fraction of the work (None: full detail; lotus.dataloader.budget)
        self.rank, self.world_size = distributed_rank()
        self.telemetry = telemetry
        self.stop_after = steps_limit()  # lotus run --steps: batches this loader hands out before the job ends
        self.stop_rule = (stop_rule(self.world_size, getattr(loader, "batch_size", None))  # --precision
                          if self.stop_after is not None else None)
        self.prefetch_factor = getattr(loader, "prefetch_factor", None) or 2
        self.replay_batches = replay_batches()  # lotus stalls' ingestion probe (lotus.dataloader.replay)
        self.consumed = 0
        self.last_batch = -1
        self._probe = None
        self._steps = None
        self._telemetry_thread = None
        self.trace_dir = trace_dir
        self.itt = itt
        self.w = main_writer(trace_dir, rank=self.rank, world_size=self.world_size)
        self.on = self.w.ok
        self.loader_id = next_loader_id() if loader_id is None else loader_id
        self.epoch = -1
        self._rec: Recorder | None = None
        if self.on:
            self.w.define_loader(self.loader_id, _describe(loader, name))
            if env_flag(DATASET_FILES_ENV):
                try:
                    from lotus.dataloader.datafiles import write_file_list

                    write_file_list(loader.dataset, trace_dir, self.rank, self.loader_id)
                except Exception as exc:
                    warn_once("dataset-files", f"lotus: cannot list the dataset's files ({exc!r})")

    # hot enough: a few events per batch
    def record(self, name_id: int, start_ns: int, dur_ns: int, batch: int, sample: int, arg: int) -> None:
        w = self.w
        w.buf += w.pack(name_id, self.loader_id, self.epoch, start_ns, dur_ns, batch, sample, arg)

    def record_in(self, epoch: int, name_id: int, start_ns: int, dur_ns: int, batch: int, sample: int,
                  arg: int) -> None:
        """An event of an earlier epoch than the current one (CUDA events resolve late: lotus.dataloader.gpu)."""
        w = self.w
        w.buf += w.pack(name_id, self.loader_id, epoch, start_ns, dur_ns, batch, sample, arg)

    def record_workers_set(self, n: int) -> None:
        """num_workers='auto' chose ``n`` workers for the epoch about to start."""
        if self.on:
            from lotus.dataloader.recorder import mono

            self.record(S.EV_WORKERS_SET, mono(), 0, S.NO_ID, S.NO_ID, n)

    def maybe_flush(self, now_ns: int) -> None:
        self.w.maybe_flush(now_ns)
        if not self.w.ok:
            self._off()

    def flush(self) -> None:
        self.w.flush()
        if not self.w.ok:
            self._off()

    def _off(self) -> None:
        self.on = False
        if self._rec is not None:
            self._rec.on = False
            self._rec.detail = False
        self.w.buf = bytearray()

    def fail(self, where: str, exc: BaseException) -> None:
        self._off()
        warn_once(f"loader:{where}", f"lotus: tracing of this DataLoader stopped ({where}: {exc!r}); "
                  "training continues untraced")

    def recorder(self) -> Recorder:
        """The main-process recorder of this loader (num_workers=0)."""
        if self._rec is None:
            self._rec = Recorder(self.w, self.loader_id, self.epoch, make_itt(self.itt),
                                 budget=DetailBudget(self.budget))
        self._rec.on = self.on
        return self._rec

    def worker_config(self, loader: TorchDataLoader) -> WorkerTraceConfig:
        from lotus.dataloader import _torch_compat as compat

        return WorkerTraceConfig(
            trace_dir=os.path.abspath(self.trace_dir), itt=self.itt, rank=self.rank,
            world_size=self.world_size, loader=self.loader_id, epoch=self.epoch,
            envelope=bool(loader.pin_memory) and compat.accelerator_available(),
            num_workers=loader.num_workers, main_pid=os.getpid(), detail_budget=self.budget,
        )

    # -- GPU (see lotus.dataloader.gpu) ----------------------------------------------------------
    def cuda_probe(self):
        """The loader's CUDA probe when CUDA is available (it activates once CUDA is initialised)."""
        if self._probe is None:
            try:
                import torch

                if torch.cuda.is_available():
                    from lotus.dataloader.gpu import CudaProbe

                    self._probe = CudaProbe(self)
                    # the writer outlives loaders: a weak method, so no cycle keeps CUDA events alive
                    close = weakref.WeakMethod(self._close_gpu)
                    self.w.closers.append(lambda: (m := close()) is not None and m())
            except Exception as exc:
                warn_once("cuda-probe", f"lotus: no CUDA events ({exc!r})")
        return self._probe

    def on_cuda_ready(self) -> None:
        if not self.telemetry or self._telemetry_thread is not None:
            return
        try:
            import torch

            from lotus.dataloader.gpu import Telemetry

            self._telemetry_thread = Telemetry(self, torch.cuda.current_device())
            self._telemetry_thread.start()
        except Exception as exc:
            self._telemetry_thread = False
            warn_once("telemetry-start", f"lotus: no GPU telemetry ({exc!r}); pip install nvidia-ml-py")

    def user_steps(self):
        if self._steps is None:
            from lotus.dataloader.gpu import UserSteps

            self._steps = UserSteps(self, self.cuda_probe())
        return self._steps

    def _close_gpu(self) -> None:
        if self._telemetry_thread:
            self._telemetry_thread.stop()
        if self._probe is not None:
            self._probe.close()
