"""`lotus demo`: the dataset generator and a tiny end-to-end run through the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from lotus.cli import cli
from lotus.demo.dataset import DatasetSpec, generate_image_folder, source_photos


def test_generated_dataset_is_imagenet_like_and_deterministic(tmp_path):
    spec = DatasetSpec(images=24, seed=3)
    train = generate_image_folder(tmp_path / "a", spec)
    files = sorted(train.rglob("*.jpg"))
    assert len(files) == 24
    assert len({p.parent.name for p in files}) == min(24, len(source_photos()))
    for p in files[:8]:
        with Image.open(p) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            assert 300 <= min(im.size) <= 500 and max(im.size) <= 750
    again = generate_image_folder(tmp_path / "b", spec)
    assert [p.read_bytes() for p in sorted(again.rglob("*.jpg"))] == [p.read_bytes() for p in files]
    mtime = files[0].stat().st_mtime_ns
    generate_image_folder(tmp_path / "a", spec)  # identical spec: kept, not rewritten
    assert files[0].stat().st_mtime_ns == mtime


@pytest.mark.timeout(180)
def test_demo_cli_end_to_end(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["demo", "--out", str(tmp_path), "--images", "32", "--steps", "3",
                                 "--batch-size", "8", "--workers", "1", "--image-px", "64", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["steps"] == 3 and summary["images"] == 24
    assert summary["trace_files"] == 2  # main + one worker
    ops = summary["op_mean_ms_per_sample"]
    assert set(ops) == {"Loader", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"}
    assert all(v > 0 for v in ops.values())
    assert 0 <= summary["wait_share"] <= 1


def test_demo_rejects_bad_options():
    result = CliRunner().invoke(cli, ["demo", "--steps", "0"])
    assert result.exit_code == 2


def test_regenerating_with_another_spec_replaces_the_images(tmp_path):
    generate_image_folder(tmp_path, DatasetSpec(images=20))
    train = generate_image_folder(tmp_path, DatasetSpec(images=10))
    assert len(list(train.rglob("*.jpg"))) == 10
