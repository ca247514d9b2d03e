"""Reading ORIGINAL LotusTrace logs: the study's real traces, and damaged ones."""

from __future__ import annotations

import shutil

import pytest

from lotus.errors import InputError, NoTraceError
from lotus.query import load_batches
from lotus.trace import find_runs, load_events


@pytest.mark.parametrize("config,batch,workers,batches", [
    ("b128_gpu4", 128, 4, 13), ("b256_gpu2", 256, 2, 10), ("b512_gpu1", 512, 1, 8)])
def test_reference_traces(reference_dir, config, batch, workers, batches):
    path = reference_dir / "traces" / config
    ev = load_events(path)
    files = ev.attrs["files"]
    assert sum(f["role"] == "worker" for f in files) == workers
    assert sorted(ev.loc[ev["role"] == "worker", "worker_id"].unique()) == list(range(workers))
    b = load_batches(path)
    assert len(b) == batches
    assert list(b["batch_id"]) == list(range(batches))
    consumed = b[b["consumed_ns"].notna()]
    assert len(consumed) == 8  # the old main file logs the first 8 consumptions
    assert (consumed["n_samples"] == batch).all()
    assert (consumed["prep_end_ns"] <= consumed["consumed_ns"]).all()
    assert b["wait_dur_ns"].isna().all()  # old format: no SBatchWait lines
    # round-robin dispatch: batch i prepared by worker i % workers
    assert (b["worker_id"] == b["batch_id"] % workers).all()
    # magnitudes of the study (README): Loader ~4.7 ms, RRC ~1 ms, ToTensor ~0.3-0.6, Normalize ~0.2-0.4,
    # flip < 0.15 ms per image; collation tens of ms per batch
    means = ev.groupby("name", observed=True)["dur_ns"].mean() / 1e6
    assert 2 < means["load"] < 10
    assert 0.5 < means["RandomResizedCrop"] < 3
    assert means["RandomHorizontalFlip"] < means["Normalize"] < means["ToTensor"] < means["RandomResizedCrop"]
    assert means["RandomResizedCrop"] < means["load"]
    assert 30 < means["collate"] * 128 / batch < 150
    # per-sample lines carry the batch whose marker follows them
    per_sample = ev[ev["name"] == "load"]
    assert (per_sample["batch_id"].value_counts().drop(-1, errors="ignore") == batch).all()


def test_reference_runs_are_natural_sorted(reference_dir):
    runs = find_runs(reference_dir / "traces")
    assert [r.name for r in runs] == ["b128_gpu4", "b256_gpu2", "b512_gpu1"]


def _copy(reference_dir, tmp_path, config="b128_gpu4"):
    dst = tmp_path / config
    shutil.copytree(reference_dir / "traces" / config, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst


def test_truncated_last_line_is_dropped_with_file_and_line(reference_dir, tmp_path, caplog):
    d = _copy(reference_dir, tmp_path)
    victim = sorted(d.glob("*_worker_pid_*"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-20])  # cut in the middle of the last line
    n_lines = data.count(b"\n")
    ev = load_events(d)
    assert f"{victim}:{n_lines}" in caplog.text
    assert len(ev) == 10018 - 1


def test_non_numeric_field_is_reported_and_the_rest_kept(reference_dir, tmp_path, caplog):
    d = _copy(reference_dir, tmp_path)
    victim = sorted(d.glob("*_worker_pid_*"))[1]
    lines = victim.read_text().splitlines(keepends=True)
    lines[9] = "SLoader,notanumber,123\n"
    lines[20] = "justonefield\n"
    victim.write_text("".join(lines))
    ev = load_events(d)
    assert f"{victim}:10" in caplog.text and f"{victim}:21" in caplog.text
    assert len(ev) == 10018 - 2


def test_unknown_event_name_is_kept_and_named(reference_dir, tmp_path, caplog):
    d = _copy(reference_dir, tmp_path)
    main = next(d.glob("*_main_pid_*"))
    main.write_text(main.read_text() + "Weird_event,1697409329096195192,5\n")
    ev = load_events(d)
    assert "unknown event name 'Weird_event'" in caplog.text and f"{main}:9" in caplog.text
    assert (ev["cat"] == "unknown").sum() == 1


def test_run_with_only_worker_files_warns(reference_dir, tmp_path, caplog):
    d = _copy(reference_dir, tmp_path)
    next(d.glob("*_main_pid_*")).unlink()
    b = load_batches(d)
    assert "no main-process file" in caplog.text
    assert b["consumed_ns"].isna().all() and len(b) == 13


def test_missing_and_empty_directories(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        load_events(tmp_path / "nope")
    with pytest.raises(NoTraceError) as info:
        load_events(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_newer_wait_format(tmp_path):
    # SBatchWait lines of the converted format; 1000 ns is the buffered placeholder
    (tmp_path / "log_main_pid_1").write_text(
        "SBatchWait_0,100,50\nSBatchConsumed_0,150,1000\nSBatchWait_1,160,1000\nSBatchConsumed_1,161,1000\n")
    (tmp_path / "log_worker_pid_2").write_text(
        "SLoader,10,5\nSCollation,20,3\nSBatchPreprocessed_0,5,30\n"
        "SLoader,40,5\nSCollation,50,3\nSBatchPreprocessed_1,35,30\n")
    b = load_batches(tmp_path)
    assert list(b["wait_dur_ns"]) == [50, 1000]
    assert list(b["buffered"]) == [False, True]
    assert list(b["consumed_ns"]) == [150, 161]
    assert list(b["delay_ns"]) == [150 - 35, 161 - 65]
