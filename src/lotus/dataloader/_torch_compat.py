"""Every private torch name lotus relies on, in one place.

lotus wraps torch's DataLoader instead of copying it. Where no public seam exists it uses the few
private names below; ``tests/dataloader/test_torch_compat.py`` is the canary that fails loudly when a
torch release moves one of them. At run time :func:`check` decides whether tracing can work with the
installed torch; when it cannot, lotus warns once and the DataLoader runs untraced (exactly torch).

Tested against the torch in constraints.txt (2.14.1); the worker-argument layout is probed by
signature, so torch 2.2-2.14 (dataset passed bare or in a one-element holder list) are both handled.
"""

from __future__ import annotations

import inspect
from functools import lru_cache

import torch
import torch.utils.data.dataloader as _dl
from torch.utils.data import _utils as _data_utils

# Iterator classes lotus subclasses (private in torch).
BaseIter = _dl._BaseDataLoaderIter
SingleProcessIter = _dl._SingleProcessDataLoaderIter
MultiProcessingIter = _dl._MultiProcessingDataLoaderIter
DatasetKind = _dl._DatasetKind

# Worker process entry point, and the messages that travel on a worker's index queue.
worker_loop = _data_utils.worker._worker_loop
ResumeIteration = _data_utils.worker._ResumeIteration
IterableDatasetStopIteration = _data_utils.worker._IterableDatasetStopIteration
ExceptionWrapper = torch._utils.ExceptionWrapper

def _cuda_stream_key():
    """(stream id, device index, device type) of the current CUDA stream: what ``torch.cuda.current_stream()``
    reads, without making its Stream object (lotus.dataloader.gpu caches that while the key is the same)."""
    return _C._cuda_getCurrentStream(_C._cuda_getDevice())


_C = torch._C
cuda_stream_key = _cuda_stream_key if hasattr(_C, "_cuda_getCurrentStream") and hasattr(_C, "_cuda_getDevice") \
    else None



def cuda_on_init(fn) -> bool:
    """Have torch call ``fn()`` when it initialises CUDA (at once if it has): ``torch.cuda._lazy_call``,
    the queue torch's lazy init runs. ``fn`` runs inside torch's init, from whichever thread starts CUDA:
    it must only set flags and never raise. False where this torch has no such queue: the caller polls
    ``torch.cuda.is_initialized()`` instead (lotus.dataloader.gpu)."""
    lazy_call = getattr(torch.cuda, "_lazy_call", None)
    if lazy_call is None:
        return False
    try:
        lazy_call(fn)
    except Exception:
        return False
    return True


# The function torch's pin-memory thread applies to each batch.
pin_memory = _data_utils.pin_memory.pin_memory

# Iterator attributes lotus reads (names only; used through getattr in iterators.py).
ITER_ATTRS = (
    "_send_idx",  # index of the next batch to dispatch
    "_rcvd_idx",  # index of the next batch to return in order
    "_task_info",  # {batch idx: (worker id,) or (worker id, data)}
    "_num_yielded",  # batches returned so far in this epoch
    "_index_queues",  # one multiprocessing queue per worker
    "_workers_status",  # liveness per worker
    "_in_order",  # torch's delivery order (lotus toggles it for delivery_order="lowest_ready_first")
    "_worker_queue_idx_cycle",  # iterator of worker ids torch dispatches to (lotus: free_worker)
    "_num_workers",
)
# Iterator methods lotus calls without overriding.
ITER_CALLS = ("_process_data",)
# Iterator methods lotus overrides (calling the torch implementation through super()).
ITER_METHODS = ("_next_data", "_next_index", "_try_put_index", "_get_data", "_reset", "_shutdown_workers")
# DataLoader method lotus overrides to hand out its own iterator subclasses.
LOADER_METHODS = ("_get_iterator",)
# DataLoader attribute lotus reads and resets (num_workers="auto" restarting persistent workers).
LOADER_ATTRS = ("_iterator",)

# Positional arguments of worker_loop that lotus replaces in a worker process.
WORKER_ARGS = (
    "dataset_kind",
    "dataset",  # or "dataset_holder" (torch >= 2.9: a one-element list the worker pops)
    "index_queue",
    "data_queue",
    "done_event",
    "auto_collation",
    "collate_fn",
    "drop_last",
    "base_seed",
    "init_fn",
    "worker_id",
    "num_workers",
    "persistent_workers",
    "shared_seed",
)


@lru_cache(maxsize=1)
def worker_arg_positions() -> dict[str, int]:
    """Positions of the worker_loop arguments lotus needs, read from its signature."""
    params = list(inspect.signature(worker_loop).parameters)
    pos = {name: i for i, name in enumerate(params)}
    if "dataset_holder" in pos:
        pos["dataset"] = pos.pop("dataset_holder")
        pos["_dataset_in_holder"] = 1
    needed = ("dataset", "index_queue", "data_queue", "collate_fn", "worker_id")
    missing = [n for n in needed if n not in pos]
    if missing:
        raise RuntimeError(f"torch {torch.__version__}: _worker_loop lacks arguments {missing}")
    return pos


@lru_cache(maxsize=1)
def check() -> str | None:
    """None when this torch has every name lotus relies on; else a sentence saying what is missing."""
    problems = []
    for cls in (MultiProcessingIter, SingleProcessIter):
        for attr in ITER_METHODS + ITER_CALLS:
            if cls is SingleProcessIter and attr not in ("_next_data", "_next_index"):
                continue
            if not callable(getattr(cls, attr, None)):
                problems.append(f"{cls.__name__}.{attr}")
    for attr in LOADER_METHODS:
        if not callable(getattr(torch.utils.data.DataLoader, attr, None)):
            problems.append(f"DataLoader.{attr}")
    try:
        worker_arg_positions()
    except RuntimeError as exc:
        problems.append(str(exc))
    if not callable(getattr(DatasetKind, "create_fetcher", None)):
        problems.append("_DatasetKind.create_fetcher")
    if problems:
        return f"torch {torch.__version__} changed DataLoader internals lotus relies on: {', '.join(problems)}"
    return None


def dataset_from_worker_args(args: tuple):
    """The dataset travelling in worker_loop's arguments (bare or in its holder list)."""
    pos = worker_arg_positions()
    value = args[pos["dataset"]]
    if pos.get("_dataset_in_holder"):
        return value[0] if isinstance(value, list) and value else None
    return value


def replace_worker_args(args: tuple, **new) -> tuple:
    """A copy of worker_loop's positional ``args`` with some replaced by name."""
    pos = worker_arg_positions()
    out = list(args)
    for name, value in new.items():
        i = pos[name]
        if name == "dataset" and pos.get("_dataset_in_holder"):
            value = [value]
        out[i] = value
    return tuple(out)


def worker_arg(args: tuple, name: str):
    return args[worker_arg_positions()[name]]


def create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last):
    return DatasetKind.create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last)


def is_iterable_kind(kind) -> bool:
    return kind == DatasetKind.Iterable


def accelerator_available() -> bool:
    """Whether torch's DataLoader will really pin memory (it needs an accelerator)."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and callable(getattr(acc, "is_available", None)):
        return bool(acc.is_available())
    return bool(torch.cuda.is_available())


def shutdown_workers(iterator) -> None:
    """Stop a multiprocess iterator's workers now (what torch does when an epoch ends)."""
    fn = getattr(iterator, "_shutdown_workers", None)
    if fn is not None:
        fn()


def persistent_iterator(loader):
    """The iterator a persistent_workers loader keeps between epochs (``DataLoader._iterator``), if any."""
    return getattr(loader, "_iterator", None)


def drop_persistent_iterator(loader) -> None:
    """Forget it, so that the next epoch starts new workers."""
    loader._iterator = None


def keep_persistent_iterator(loader, iterator) -> None:
    """Make ``iterator`` the one a persistent_workers loader resets at its next epoch."""
    loader._iterator = iterator


def set_loader_setting(loader, name: str, value) -> None:
    """Set a DataLoader attribute after its ``__init__``, past torch's guard (``DataLoader.__setattr__``
    refuses ``persistent_workers`` once initialised); only between iterators (lotus.dataloader.series)."""
    object.__setattr__(loader, name, value)


class _Spent:
    """What an iterator object becomes once another took over its state (no ``__del__``: it stops nothing)."""


def become(iterator, new) -> None:
    """Give ``iterator`` (the object the training loop holds) the class and state of ``new``, a fresh
    iterator of the same loader; ``new`` keeps nothing (its ``__del__`` would stop the workers it handed over).
    torch's iterators are plain Python classes (no ``__slots__``), so the swap is Python's own ``__class__``
    assignment; the canary test checks it."""
    state = new.__dict__
    pids = tuple(w.pid for w in state.get("_workers", ())) if state.get("_worker_pids_set") else None
    if pids is not None:  # torch keys its SIGCHLD bookkeeping of a worker set by the iterator's id()
        _data_utils.signal_handling._remove_worker_pids(id(new))
    atexit_set = getattr(_dl, "_persistent_workers_atexit", None)  # torch >= 2.10: persistent+pinned iterators
    registered = atexit_set is not None and new in atexit_set
    iterator.__class__ = type(new)
    iterator.__dict__ = state
    new.__class__ = _Spent
    new.__dict__ = {}
    if pids is not None:
        _data_utils.signal_handling._set_worker_pids(id(iterator), pids)
    if registered:
        atexit_set.discard(new)
        atexit_set.add(iterator)


@lru_cache(maxsize=1)
def _worker_check_site() -> tuple[str, int] | None:
    """(file, line) of the ``check_worker_number_rationality()`` call in torch's own ``_get_iterator``."""
    fn = torch.utils.data.DataLoader._get_iterator
    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    for i, line in enumerate(lines):
        if "check_worker_number_rationality(" in line:
            return path, first + i
    return None


class _Collect:
    """Stands in for the ``warnings`` module in torch's dataloader module while its check runs."""

    def __init__(self, real):
        self.real = real
        self.got: list[tuple] = []

    def warn(self, message, category=None, stacklevel=1, source=None, **kwargs):
        self.got.append((message, category))

    def __getattr__(self, name):
        return getattr(self.real, name)


def check_worker_number(loader) -> None:
    """torch's "This DataLoader will create N worker processes" warning, given as torch's own
    ``_get_iterator`` gives it: attributed to that call's file and line, in torch's module warning
    registry, so it shows exactly as often as with stock torch (lotus's iterator replaces that call)."""
    import warnings

    site = _worker_check_site()
    real = getattr(_dl, "warnings", None)
    if site is None or real is not warnings:
        loader.check_worker_number_rationality()
        return
    collect = _Collect(real)
    _dl.warnings = collect
    try:
        loader.check_worker_number_rationality()
    finally:
        _dl.warnings = real
    registry = _dl.__dict__.setdefault("__warningregistry__", {})
    for message, category in collect.got:
        if isinstance(message, Warning):
            category = type(message)
        warnings.warn_explicit(message, category or UserWarning, site[0], site[1], module=_dl.__name__,
                               registry=registry, module_globals=_dl.__dict__)
