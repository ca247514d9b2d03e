"""A small ImageNet-like JPEG dataset made from real photographs, without downloads.

Each image is a random crop of one of the bundled public-domain photos (see photos/LICENSE.md),
resized to an ImageNet-like size (short side 300-500 px, landscape or portrait), with mild
photometric jitter, a random flip and a random JPEG quality. One class per source photo, laid out
as torchvision's ImageFolder expects: ``root/train/<class>/<class>_<n>.jpg``. Deterministic per seed.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

_log = logging.getLogger("lotus.demo")
PHOTOS = Path(__file__).resolve().parent / "photos"
_ASPECTS = (1.0, 1.25, 4 / 3, 1.5)
_MANIFEST = "lotus-demo-dataset.json"


@dataclass(frozen=True)
class DatasetSpec:
    images: int = 800
    seed: int = 0
    min_short_px: int = 300
    max_short_px: int = 500
    quality_min: int = 75
    quality_max: int = 95
    version: int = 2


def source_photos() -> list[Path]:
    photos = sorted(PHOTOS.glob("*.jpg"))
    try:
        import matplotlib

        hopper = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
        if hopper.exists():
            photos.append(hopper)
    except Exception:
        pass
    return photos


def _one_image(rng: random.Random, src, spec: DatasetSpec):
    from PIL import Image, ImageEnhance, ImageOps

    w, h = src.size
    area = w * h * rng.uniform(0.35, 1.0)
    ratio = rng.uniform(3 / 4, 4 / 3)
    cw = min(w, round((area * ratio) ** 0.5))
    ch = min(h, round((area / ratio) ** 0.5))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    img = src.crop((x, y, x + cw, y + ch))
    short = rng.randint(spec.min_short_px, spec.max_short_px)
    long_ = round(short * rng.choice(_ASPECTS))
    size = (long_, short) if rng.random() < 0.7 else (short, long_)  # mostly landscape, like ImageNet
    img = img.resize(size, Image.BICUBIC)
    if rng.random() < 0.5:
        img = ImageOps.mirror(img)
    img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.8, 1.2))
    img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.8, 1.2))
    img = ImageEnhance.Color(img).enhance(rng.uniform(0.7, 1.3))
    return img, rng.randint(spec.quality_min, spec.quality_max)


def _write_range(args) -> int:
    root, spec, lo, hi = args
    from PIL import Image

    sources = [(p.stem, Image.open(p).convert("RGB")) for p in source_photos()]
    for i in range(lo, hi):
        cls, src = sources[i % len(sources)]
        img, quality = _one_image(random.Random(f"{spec.seed}-{i}"), src, spec)  # one RNG per image
        img.save(Path(root) / cls / f"{cls}_{i:05d}.jpg", quality=quality)
    return hi - lo


def generate_image_folder(root: str | Path, spec: DatasetSpec = DatasetSpec(),
                          progress: Callable[[int, int], None] | None = None, workers: int = 1) -> Path:
    """Write the dataset under ``root/train`` (kept if an identical one is already there).

    ``workers`` > 1 generates in that many processes; the images are the same either way.
    """
    root = Path(root)
    manifest = root / _MANIFEST
    train = root / "train"
    if manifest.exists():
        try:
            if json.loads(manifest.read_text()) == asdict(spec):
                return train
        except (OSError, ValueError):
            pass
    photos = source_photos()
    if not photos:
        raise FileNotFoundError(f"no source photos in {PHOTOS}")
    for p in photos:
        (train / p.stem).mkdir(parents=True, exist_ok=True)
        for old in (train / p.stem).glob(f"{p.stem}_*.jpg"):  # a different earlier spec: start afresh
            old.unlink()
    manifest.unlink(missing_ok=True)
    chunk = 64
    jobs = [(train, spec, lo, min(lo + chunk, spec.images)) for lo in range(0, spec.images, chunk)]
    done = 0
    if workers > 1 and len(jobs) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for n in pool.imap_unordered(_write_range, jobs):
                done += n
                if progress is not None:
                    progress(done, spec.images)
    else:
        for job in jobs:
            done += _write_range(job)
            if progress is not None:
                progress(done, spec.images)
    manifest.write_text(json.dumps(asdict(spec)))
    _log.info("generated %d JPEG images in %s", spec.images, train)
    return train
