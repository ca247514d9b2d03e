"""lotus.dataloader: a drop-in, traceable ``torch.utils.data.DataLoader``.

    from lotus.dataloader import DataLoader
    loader = DataLoader(dataset, batch_size=64, num_workers=4, trace_dir="traces/run1")

or leave the script unchanged apart from the import and run it with ``LOTUS_TRACE_DIR=traces/run1``.
"""

from lotus.dataloader.loader import DataLoader

__all__ = ["DataLoader"]
