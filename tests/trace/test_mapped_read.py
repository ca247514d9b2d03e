"""Plain trace files are mapped a chunk at a time (lotus.trace.parts._mapped_chunks): the same chunks as
reading them, truncated files salvaged the same, files growing while read read to their end."""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import numpy as np
import pytest

from lotus.query.scanplan import plan
from lotus.trace import parts
from lotus.trace import schema as S
from lotus.trace.native import read_header
from lotus.trace.parts import iter_records
from lotus.trace.simulated import PipelineSpec
from lotus.trace.synthetic import write_native
from tests.trace.test_packed import _packed_file


def _chunks(path: Path, chunk: int, monkeypatch=None, mapped: bool = True) -> list[np.ndarray]:
    """The chunks of ``path`` as copies, mapped or (``mapped=False``: mmap made to fail) read."""
    if not mapped:
        def no_map(*a, **k):
            raise OSError("no mmap here")

        monkeypatch.setattr(mmap, "mmap", no_map)
    _, offset = read_header(path)
    out = [c.copy() for c in iter_records(path, offset, chunk)]
    if not mapped:
        monkeypatch.undo()
    return out


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert [len(x) for x in a] == [len(x) for x in b]
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("mapped")
    write_native(d, PipelineSpec(n_batches=40, batch_size=4, n_workers=2, seed=5))
    return d


@pytest.mark.parametrize("chunk", [1, 2, 7, 100, 1 << 20])
def test_mapped_chunks_are_the_read_chunks(run, monkeypatch, chunk):
    for p in sorted(run.iterdir()):
        mapped = _chunks(p, chunk)
        _same(mapped, _chunks(p, chunk, monkeypatch, mapped=False))
        assert all(not c.flags.writeable for c in iter_records(p, read_header(p)[1], chunk))


@pytest.mark.parametrize("chunk", [2, 3, 5, 64])
def test_packed_pairs_are_cut_the_same(tmp_path, monkeypatch, chunk):
    path = _packed_file(tmp_path, 9)
    mapped = _chunks(path, chunk)
    assert all(c["name_id"][-1] != S.EV_MAIN_BATCH for c in mapped[:-1])
    _same(mapped, _chunks(path, chunk, monkeypatch, mapped=False))


@pytest.mark.parametrize("cut", [1, 17, S.RECORD_SIZE - 1, S.RECORD_SIZE, S.RECORD_SIZE + 5])
def test_a_truncated_file_is_salvaged_the_same(run, tmp_path, monkeypatch, caplog, cut):
    src = sorted(run.iterdir())[0]
    path = tmp_path / src.name
    data = src.read_bytes()
    path.write_bytes(data[:-cut])
    with caplog.at_level(logging.WARNING, logger="lotus.trace"):
        mapped = _chunks(path, 13)
    text = caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lotus.trace"):
        read = _chunks(path, 13, monkeypatch, mapped=False)
    _same(mapped, read)
    assert text == caplog.text
    assert ("truncated" in text) == (cut % S.RECORD_SIZE != 0)


def test_a_file_growing_while_read_is_read_to_its_end(run, tmp_path):
    src = sorted(run.iterdir())[0]
    _, offset = read_header(src)
    data = src.read_bytes()
    n = (len(data) - offset) // S.RECORD_SIZE
    half = offset + n // 2 * S.RECORD_SIZE
    path = tmp_path / src.name
    path.write_bytes(data[:half])
    got = []
    for i, c in enumerate(iter_records(path, offset, 5)):
        got.append(c.copy())
        if i == 0:
            with open(path, "ab") as f:
                f.write(data[half:])
    assert np.concatenate(got).tobytes() == data[offset: offset + n * S.RECORD_SIZE]


def test_a_compressed_part_is_read_as_before(run, tmp_path, monkeypatch):
    zstd = pytest.importorskip("pyarrow")
    src = sorted(run.iterdir())[1]
    path = tmp_path / (src.name + parts.ZST)
    with zstd.output_stream(str(path), compression="zstd") as f:
        f.write(src.read_bytes())
    _same(_chunks(path, 11), _chunks(src, 11))  # no packed pairs in a worker's file: the same cuts


def test_a_tapered_plan_cuts_smaller_runs_towards_the_end(tmp_path):
    paths = []
    for i in range(41):
        p = tmp_path / f"lotus-r0-w{i % 4}-p{1000 + i}.lotustrace"
        p.write_bytes(b"\0" * 1000)
        paths.append(p)
    tasks = plan(paths, 10, jobs=2)
    sizes = [len(t) for t in tasks]
    assert [p for t in tasks for p in t] == paths
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1 and sizes[0] > 41 / 10
    assert plan(paths, 10) == plan(paths, 10, jobs=1)  # one process: equal runs, as before
