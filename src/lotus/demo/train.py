"""The demo training run: a small torchvision model on the generated dataset, traced by lotus."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lotus.demo.dataset import DatasetSpec, generate_image_folder

_log = logging.getLogger("lotus.demo")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


@dataclass
class DemoConfig:
    root: Path = Path("lotus-demo")
    images: int = 800
    steps: int = 40
    batch_size: int = 32
    workers: int = 2
    model: str = "auto"  # resnet18 with CUDA, mobilenet_v3_small on CPU
    device: str = "auto"
    image_px: int = 224
    lr: float = 0.05
    seed: int = 0
    itt: bool = False
    trace_dir: Path | None = None  # default: root/runs/<time stamp>


@dataclass
class DemoResult:
    trace_dir: Path
    data_dir: Path
    model: str
    device: str
    steps: int
    images: int
    train_s: float
    generate_s: float
    losses: list[float] = field(default_factory=list)

    @property
    def images_per_s(self) -> float:
        return self.images / self.train_s if self.train_s > 0 else 0.0


def _pick(cfg: DemoConfig) -> tuple[str, str]:
    import torch

    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = cfg.model
    if model == "auto":
        model = "resnet18" if device.startswith("cuda") else "mobilenet_v3_small"
    return model, device


def run_demo(cfg: DemoConfig, progress: Callable[[str, int, int], None] | None = None) -> DemoResult:
    """Generate the dataset (once), train ``cfg.steps`` steps with the lotus DataLoader, return timings.

    ``progress(phase, done, total)`` is called as images are generated and steps are taken.
    """
    import torch
    import torchvision
    from torchvision import transforms as T

    from lotus.dataloader import DataLoader

    t0 = time.perf_counter()
    data = generate_image_folder(
        cfg.root / "data", DatasetSpec(images=cfg.images, seed=cfg.seed),
        progress=(lambda d, n: progress("dataset", d, n)) if progress else None,
    )
    generate_s = time.perf_counter() - t0
    model_name, device = _pick(cfg)
    torch.manual_seed(cfg.seed)
    dataset = torchvision.datasets.ImageFolder(
        str(data),
        transform=T.Compose([
            T.RandomResizedCrop(cfg.image_px),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]),
    )
    trace_dir = cfg.trace_dir or cfg.root / "runs" / time.strftime("%Y%m%d-%H%M%S")
    cuda = device.startswith("cuda")
    loader = DataLoader(
        dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.workers, pin_memory=cuda,
        drop_last=True, trace_dir=trace_dir, itt=cfg.itt, trace_name="train",
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    model = getattr(torchvision.models, model_name)(num_classes=len(dataset.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    losses: list[float] = []
    step = 0
    t1 = time.perf_counter()
    while step < cfg.steps:
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            opt.step()
            step += 1
            if step % 5 == 0 or step == cfg.steps:
                losses.append(float(loss.detach()))
            if progress:
                progress("train", step, cfg.steps)
            if step >= cfg.steps:
                break
    if cuda:
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t1
    del loader  # shuts workers down; their trace files are complete
    from lotus.trace.writer import close_main_writers

    close_main_writers()
    return DemoResult(trace_dir=Path(trace_dir), data_dir=data, model=model_name, device=device, steps=step,
                      images=step * cfg.batch_size, train_s=train_s, generate_s=generate_s, losses=losses)
