"""Canary: fails loudly when a torch release moves a private name lotus relies on.

If this fails after a torch upgrade, update src/lotus/dataloader/_torch_compat.py (the only module
that touches torch internals) and docs/compatibility.md.
"""

from __future__ import annotations

import inspect

import torch

from lotus.dataloader import _torch_compat as compat


def test_no_problem_with_installed_torch():
    assert compat.check() is None, compat.check()


def test_iterator_classes_and_methods_exist():
    for cls in (compat.MultiProcessingIter, compat.SingleProcessIter):
        assert issubclass(cls, compat.BaseIter)
    for name in compat.ITER_METHODS:
        assert callable(getattr(compat.MultiProcessingIter, name)), name
    assert callable(torch.utils.data.DataLoader._get_iterator)


def test_iterator_attributes_exist_on_a_live_iterator():
    from tests.dataloader.datasets import MapDS

    it = iter(torch.utils.data.DataLoader(MapDS(n=4), batch_size=2, num_workers=1))
    try:
        for attr in compat.ITER_ATTRS:
            assert hasattr(it, attr), attr
        assert isinstance(it._task_info, dict)
        next(it)
    finally:
        it._shutdown_workers()


def test_cuda_stream_key_is_what_current_stream_reads():
    assert compat.cuda_stream_key is not None, "torch._C._cuda_getCurrentStream/_cuda_getDevice moved"
    if not torch.cuda.is_available():
        return
    s = torch.cuda.current_stream()
    assert compat.cuda_stream_key() == (s.stream_id, s.device_index, s.device_type)


def test_cuda_init_queue_exists():
    """torch.cuda._lazy_call: the probe learns that CUDA started without asking every batch (gpu.py)."""
    ran = []
    assert compat.cuda_on_init(lambda: ran.append(1)), "torch.cuda._lazy_call moved: the probe polls per batch"
    assert ran == ([1] if torch.cuda.is_initialized() else [])  # queued until torch initialises CUDA


def test_worker_loop_arguments():
    params = list(inspect.signature(compat.worker_loop).parameters)
    pos = compat.worker_arg_positions()
    for name in ("index_queue", "data_queue", "collate_fn", "worker_id", "dataset_kind"):
        assert params[pos[name]] == name
    assert params[pos["dataset"]] in ("dataset", "dataset_holder")
    # the documented layout lotus expects (torch 2.14: 14 arguments)
    assert len(params) == len(compat.WORKER_ARGS)


def test_worker_loop_messages_and_pin_function():
    assert compat.ResumeIteration.__name__ == "_ResumeIteration"
    assert compat.IterableDatasetStopIteration.__name__ == "_IterableDatasetStopIteration"
    import inspect as _inspect

    assert next(iter(_inspect.signature(compat.pin_memory).parameters)) == "data"
    assert compat.pin_memory("text") == "text"  # no accelerator needed for non-tensors
    assert callable(compat.create_fetcher)


def test_replace_worker_args_roundtrip():
    args = tuple(f"a{i}" for i in range(len(compat.WORKER_ARGS)))
    pos = compat.worker_arg_positions()
    holder_args = list(args)
    holder_args[pos["dataset"]] = ["DS"] if pos.get("_dataset_in_holder") else "DS"
    out = compat.replace_worker_args(tuple(holder_args), dataset="NEW", collate_fn="C")
    assert compat.dataset_from_worker_args(out) == "NEW"
    assert compat.worker_arg(out, "collate_fn") == "C"


def test_loader_attributes_exist_on_a_persistent_loader():
    from tests.dataloader.datasets import MapDS

    loader = torch.utils.data.DataLoader(MapDS(n=4), batch_size=2, num_workers=1, persistent_workers=True)
    for attr in compat.LOADER_ATTRS:
        assert hasattr(loader, attr), attr
    list(loader)
    it = compat.persistent_iterator(loader)
    assert isinstance(it, compat.MultiProcessingIter)
    compat.shutdown_workers(it)
    compat.drop_persistent_iterator(loader)
    assert compat.persistent_iterator(loader) is None
    assert len(list(loader)) == 2  # a new iterator, new workers


def test_an_iterator_becomes_another_with_its_workers_and_torch_s_bookkeeping():
    # lotus.dataloader.series: the loop's iterator object takes over a fresh iterator's class and state
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=0)
    held = iter(loader)  # the loop holds a num_workers=0 iterator
    assert next(held).tolist() == [0, 1]
    compat.set_loader_setting(loader, "num_workers", 2)
    compat.set_loader_setting(loader, "persistent_workers", True)  # torch refuses this after __init__
    compat.set_loader_setting(loader, "prefetch_factor", 2)
    compat.set_loader_setting(loader, "pin_memory", True)
    fresh = loader._get_iterator()
    compat.become(held, fresh)
    assert type(held) is compat.MultiProcessingIter and not hasattr(fresh, "_workers")
    del fresh  # a spent object stops nothing
    assert [b.tolist() for b in held] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # the new workers serve the same object
    atexit_set = getattr(torch.utils.data.dataloader, "_persistent_workers_atexit", None)
    if atexit_set is not None and compat.accelerator_available():
        assert held in atexit_set
    held._shutdown_workers()  # torch's SIGCHLD bookkeeping follows the object (KeyError/ValueError otherwise)
