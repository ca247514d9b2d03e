"""Small traces for the analysis tests: synthetic (both formats), DDP, stragglers, and one real run."""

from __future__ import annotations

import pytest

from lotus.trace.synthetic import PipelineSpec, write_native, write_original

SMALL = PipelineSpec(n_batches=12, batch_size=4, n_workers=2, seed=1, step_ms=20.0)


@pytest.fixture(scope="session")
def synth_native(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "native"
    write_native(d, SMALL)
    return d


@pytest.fixture(scope="session")
def synth_original(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "original"
    write_original(d, SMALL)
    return d


@pytest.fixture(scope="session")
def synth_epochs(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "epochs"
    write_native(d, PipelineSpec(n_batches=10, batch_size=4, n_workers=2, epochs=3, seed=2))
    return d


@pytest.fixture(scope="session")
def straggler_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "straggler"
    write_native(d, PipelineSpec(n_batches=40, batch_size=8, n_workers=4, step_ms=25, straggler_every=7,
                                 straggler_factor=6, seed=3))
    return d


@pytest.fixture(scope="session")
def ddp_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "ddp"
    write_native(d, PipelineSpec(n_batches=8, batch_size=4, n_workers=2, ranks=2, seed=4))
    return d


@pytest.fixture(scope="session")
def real_run(tmp_path_factory):
    """A run traced by lotus's own DataLoader (2 workers, 2 epochs), with a torch.profiler trace."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from lotus.dataloader import DataLoader

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            time.sleep(0.002 if i % 8 else 0.01)
            return torch.full((3,), float(i))

    d = tmp_path_factory.mktemp("real") / "run"
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=2, trace_dir=d)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _epoch in range(2):
            for i, _batch in enumerate(loader):
                with record_function(f"train_step_{i}"):
                    time.sleep(0.003)
    prof.export_chrome_trace(str(d / "profile.pt.trace.json"))
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    return d
