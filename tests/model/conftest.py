"""Synthetic runs of known truth for the model tests (the simulator of lotus.sim writes them).

The truth: per sample load 4 ms and three transform ops of 1 ms in all, batch 16, collation 0.1 ms per
sample, a 30 ms step; 2 workers on 4 CPUs (the main process takes one): input-bound at ~390 samples/s.
"""

from __future__ import annotations

import pytest

from lotus.model import load_run
from lotus.trace.synthetic import PipelineSpec, write_native

OPS = {"RandomResizedCrop": 0.5, "ToTensor": 0.3, "Normalize": 0.2}
TRUTH = {"load_ms": 4.0, "ops_ms": OPS, "batch_size": 16, "collate_ms_per_sample": 0.1, "step_ms": 30.0}
BASE = {**TRUTH, "n_batches": 200, "cpus": 4, "seed": 5}


def spec(**kw) -> PipelineSpec:
    return PipelineSpec(**{**BASE, **kw})


@pytest.fixture(scope="session")
def make_dir(tmp_path_factory):
    """``make_dir(name, **spec changes)`` -> the run's directory (written once per name)."""
    made = {}

    def make(name: str, **kw):
        if name not in made:
            d = tmp_path_factory.mktemp("model") / name
            write_native(d, spec(**kw))
            made[name] = d
        return made[name]

    return make


@pytest.fixture(scope="session")
def make_run(make_dir):
    """``make_run(name, cache_state=None, **spec changes)`` -> RunTrace."""

    def make(name: str, cache_state: str | None = None, **kw):
        return load_run(make_dir(name, **kw), cache_state=cache_state)

    return make


@pytest.fixture(scope="session")
def truth_run(make_run):
    return make_run("w2")


@pytest.fixture(scope="session")
def truth_model(truth_run):
    from lotus.model import fit

    return fit(truth_run)
