"""Every command on every run of the corpus (fixtures, reference traces, a demo run, lotus's DataLoader,
damaged traces), on both engines (original logs: in memory only, as lotus reads them): the output
invariants hold and the engines give the same figures."""

from __future__ import annotations

import pytest

from tests.invariants.commands import check_run, compare_engines, engine

CORPUS = ["synth-native", "synth-original", "synth-epochs", "straggler", "ddp", "real-dataloader", "outcomes",
          "outcomes-legacy", "demo", "lotus-2023", "b128_gpu4", "gpu", "compacted",
          "packed", "iterable-end", "workers-only", "truncated-line", "bad-fields", "torn-record",
          "runs-with-a-broken-one", "missing", "empty"]


# diff: each run against another of its kind
DIFF = {"synth-native": "straggler", "synth-epochs": "ddp", "outcomes": "synth-native", "demo": "real-dataloader",
        "b128_gpu4": "synth-original", "gpu": "ddp", "packed": "iterable-end", "torn-record": "synth-native"}


# original LotusTrace logs: read in memory whatever the engine (lotus.analysis.runs._engine_for)
ORIGINAL = {"synth-original", "lotus-2023", "b128_gpu4", "workers-only", "truncated-line", "bad-fields", "missing",
            "empty"}


@pytest.mark.parametrize("name", CORPUS)
def test_every_output_keeps_the_invariants(name, corpus, tmp_path):
    """Text, JSON and HTML on the in-memory engine; the JSON outputs again on the scan engine, the same."""
    found, docs = [], {}
    for eng, text in (("memory", True), ("scan", False))[: 1 if name in ORIGINAL else 2]:
        with engine(eng):
            v, docs[eng] = check_run(corpus[name], tmp_path / eng, text=text,
                                     diff_with=corpus[DIFF[name]] if name in DIFF else None)
        found += v
    if name not in ORIGINAL:
        found += compare_engines(docs["memory"], docs["scan"])
    assert not found, "\n".join(dict.fromkeys(map(str, found)))
