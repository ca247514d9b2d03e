"""One tenant of ``lotus power bench``: inference of a torchvision model, in lockstep with the others.

    python -m lotus.power.tenant --model resnet50 --batch 1,8,32 --seconds 10 --data DIR \\
        --sync SYNC_DIR --tenant 0 --result tenant-0.json

Generated JPEGs come through lotus's traced DataLoader (``--data-mode cached``: decoded once, then the
uint8 tensors from memory; ``jpeg``: decoded every batch). For each batch size: build the loader, warm
up, write ``SYNC/ready-<k>-<tenant>.json``, wait for ``SYNC/go-<k>.json`` (the bench writes it when
every tenant is ready: the measured window in monotonic seconds, or ``skip``/``abort``), run until the
window ends, and add the point to the result JSON (rewritten after each point). Each batch: host to
device copy, normalisation, forward under ``torch.inference_mode``, synchronise; latency from the host
clock, GPU time from CUDA events. Needs torch and torchvision only (no click).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def _wait_go(sync: Path, k: int, wait_s: float) -> dict:
    path, deadline = sync / f"go-{k}.json", time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if path.exists():
            try:
                return json.loads(path.read_text())
            except ValueError:  # being written
                pass
        time.sleep(0.005)
    return {"abort": f"no go signal for point {k} within {wait_s:.0f} s"}


class _Cycle:
    """An endless map-style view of a dataset (index modulo its length)."""

    def __init__(self, base, length: int = 10**9):
        self.base, self.length = base, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i):
        return self.base[i % len(self.base)]


class _Tensors:
    def __init__(self, images):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], 0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


class Tenant:
    def __init__(self, a: argparse.Namespace):
        import torch
        import torchvision
        from torchvision import transforms as T

        self.a, self.torch = a, torch
        self.cuda = a.device == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to this process")
        self.device = torch.device("cuda" if self.cuda else "cpu")
        if not self.cuda and a.threads:
            torch.set_num_threads(a.threads)
        if self.cuda:
            torch.backends.cudnn.benchmark = True
        self.fmt = torch.channels_last if a.channels_last else torch.contiguous_format
        self.model = torchvision.models.get_model(a.model, weights=None).eval().to(self.device, memory_format=self.fmt)
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
        shape = (1, 3, 1, 1)
        self.mean = torch.tensor(_MEAN, device=self.device).view(shape) * 255
        self.std = torch.tensor(_STD, device=self.device).view(shape) * 255
        tf = T.Compose([T.Resize(a.image_size), T.CenterCrop(a.image_size), T.PILToTensor()])
        self.files = torchvision.datasets.ImageFolder(a.data, transform=tf)
        if a.images:
            self.files = torch.utils.data.Subset(self.files, range(min(a.images, len(self.files))))
        self.dataset = self.files if a.data_mode == "jpeg" else _Tensors(self._decode())

    def _loader(self, batch: int, name: str, dataset, workers: int):
        from lotus.dataloader import DataLoader

        return DataLoader(dataset, batch_size=batch, num_workers=workers, pin_memory=self.cuda,
                          trace_name=name)

    def _decode(self):
        """Every image once through the traced loader, kept as one uint8 tensor."""
        loader = self._loader(32, "power-decode", self.files, self.a.workers)
        return self.torch.cat([x for x, _ in loader])

    def step(self, x):
        torch = self.torch
        x = x.to(self.device, non_blocking=True).to(memory_format=self.fmt)
        amp = torch.autocast(self.device.type, dtype=self.dtype) if self.dtype else contextlib.nullcontext()
        with torch.inference_mode(), amp:
            return self.model((x.float() - self.mean) / self.std)

    def run_point(self, k: int, batch: int) -> dict | None:
        """One batch size; None when the bench aborts the run."""
        torch, a, sync = self.torch, self.a, Path(self.a.sync)
        point: dict = {"batch": batch, "error": None}
        it = None
        try:
            loader = self._loader(batch, f"power-b{batch}", _Cycle(self.dataset), a.workers)
            it = iter(loader)
            t_end, n = time.monotonic() + a.warmup_s, 0
            while n < 3 or time.monotonic() < t_end:
                x, _ = next(it)
                self.step(x)
                self._sync()
                n += 1
        except Exception as exc:
            point["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            if self.cuda:
                torch.cuda.empty_cache()
        _write_json(sync / f"ready-{k}-{a.tenant}.json", {"ok": point["error"] is None, "error": point["error"]})
        go = _wait_go(sync, k, a.wait_s)
        if "abort" in go:
            return None
        if point["error"] is None and "skip" in go:
            point["error"] = f"skipped: {go['skip']}"
        if point["error"] is None:
            point.update(self._measure(it, float(go["start_mono"]), float(go["end_mono"])))
        del it
        return point

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _measure(self, it, t0: float, t1: float) -> dict:
        torch = self.torch
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if self.cuda else None
        spans, lat, gpu, wait_in = [], [], [], 0.0
        prev = time.monotonic()
        while prev < t1:
            x, _ = next(it)
            got = time.monotonic()
            if ev:
                ev[0].record()
            self.step(x)
            if ev:
                ev[1].record()
            self._sync()
            end = time.monotonic()
            spans.append((prev, end, len(x)))
            if t0 <= end <= t1:
                lat.append((end - got) * 1e3)
                if ev:
                    gpu.append(ev[0].elapsed_time(ev[1]))
            wait_in += max(0.0, min(got, t1) - max(prev, t0))
            prev = end
        samples = sum(n * max(0.0, min(e, t1) - max(s, t0)) / (e - s) for s, e, n in spans if e > s)
        window = t1 - t0
        return {"samples": samples, "window_s": window, "samples_per_s": samples / window, "batches": len(lat),
                "latencies_ms": [round(v, 4) for v in lat],
                "latency_p50_ms": _percentile(lat, 50), "latency_p99_ms": _percentile(lat, 99),
                "gpu_ms_p50": _percentile(gpu, 50), "data_wait_share": wait_in / window}


def _parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lotus.power.tenant", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch", required=True, help="batch sizes, comma-separated, measured in this order")
    p.add_argument("--seconds", type=float, default=10.0)  # informative: the bench's go files set the window
    p.add_argument("--data", required=True, help="an ImageFolder root (lotus.demo.dataset)")
    p.add_argument("--sync", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--tenant", type=int, default=0)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--amp", choices=("off", "fp16", "bf16"), default="off")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--data-mode", choices=("cached", "jpeg"), default="cached")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="CPU threads of torch (cpu device)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--images", type=int, default=0, help="use at most this many images (0: all)")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--wait-s", type=float, default=600.0, help="longest wait for the bench's go signal")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = _parse(argv)
    result = Path(a.result)
    doc: dict = {"tenant": a.tenant, "pid": os.getpid(), "model": a.model, "device": a.device, "amp": a.amp,
                 "channels_last": a.channels_last, "data_mode": a.data_mode, "points": [], "fatal": None}
    batches = [int(b) for b in a.batch.split(",") if b.strip()]
    try:
        tenant = Tenant(a)
        doc["torch"] = tenant.torch.__version__
        if tenant.cuda:
            doc["device_name"] = tenant.torch.cuda.get_device_name(0)
    except Exception as exc:
        doc["fatal"] = f"{type(exc).__name__}: {exc}"[:500]
        _write_json(result, doc)
        for k in range(len(batches)):  # tell the bench at once instead of letting it time out
            _write_json(Path(a.sync) / f"ready-{k}-{a.tenant}.json", {"ok": False, "error": doc["fatal"]})
        sys.stderr.write(f"lotus power tenant {a.tenant}: {doc['fatal']}\n")
        return 1
    _write_json(result, doc)
    for k, b in enumerate(batches):
        point = tenant.run_point(k, b)
        if point is None:
            doc["fatal"] = "aborted by the bench"
            _write_json(result, doc)
            return 3
        doc["points"].append(point)
        _write_json(result, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
