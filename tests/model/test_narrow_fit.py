"""Issue 25: a run read only to be fitted keeps only the batches columns the fit reads
(``load_run(columns=MODEL_COLUMNS)``: what ``fit(path)`` and ``lotus whatif`` do), assembled from the
scanned table's pieces, and observe() copies the batches only where it drops rows: the same model."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.analysis.jsonutil import dumps
from lotus.model import fit, load_run, observe
from lotus.model.observation import MODEL_COLUMNS
from lotus.query import batchtable
from tests.model.test_scan_fit import _runs, _same

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("kind", ["synth", "outcome", "real", "pooled", "two-loaders"])
@pytest.mark.parametrize("rows", [None, 7])
def test_narrow_batches_same_model(kind, rows, tmp_path, monkeypatch):
    runs = _runs(kind, tmp_path)
    monkeypatch.setenv("LOTUS_ENGINE", "scan")
    whole = [load_run(r) for r in runs]
    want = fit(whole), [observe(r) for r in whole]
    if rows is not None:  # the frame assembled from pieces of a few rows
        monkeypatch.setattr(batchtable, "FRAME_ROWS", rows)
    narrow = [load_run(r, columns=MODEL_COLUMNS) for r in runs]
    assert list(narrow[0].batches.columns) == MODEL_COLUMNS
    _same(want, (fit(narrow), [observe(r) for r in narrow]))
    by_path = fit(runs)  # as_run: the narrow frame
    assert dumps(by_path.to_dict()) == dumps(want[0].to_dict())
    assert np.array_equal(by_path.measured.items_ns, want[0].measured.items_ns)


def test_observe_sorts_when_needed(tmp_path, monkeypatch):
    """Rows out of key order (a DataFrame given by the caller) are still sorted; in order, not copied."""
    runs = _runs("synth", tmp_path)
    run = load_run(runs[0])
    want = dumps(fit(run).to_dict())
    shuffled = load_run(runs[0])
    shuffled.batches = shuffled.batches.sample(frac=1.0, random_state=1)
    assert dumps(fit(shuffled).to_dict()) == want
