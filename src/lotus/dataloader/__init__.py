"""lotus.dataloader: a drop-in, traceable ``torch.utils.data.DataLoader``.

    from lotus.dataloader import DataLoader
    loader = DataLoader(dataset, batch_size=64, num_workers=4, trace_dir="traces/run1")

or leave the script unchanged apart from the import and run it with ``LOTUS_TRACE_DIR=traces/run1``.
torch is imported when ``DataLoader`` is first used from here, so torch-free helpers of this package
(``lotus.dataloader.overrides``, ``.config``) stay cheap to import.

The tracing side (runs inside training jobs): writes through :mod:`lotus.trace.writer`; uses the
layers above from a few entry points (the auto-tuner asks :mod:`lotus.model`, the probe
:mod:`lotus.analysis.steady`, the live view :mod:`lotus.live`).
Never the commands (see docs/architecture.md).
"""

__all__ = ["DataLoader"]


def __getattr__(name: str):
    if name == "DataLoader":
        from lotus.dataloader.loader import DataLoader

        return DataLoader
    raise AttributeError(f"module 'lotus.dataloader' has no attribute {name!r}")
