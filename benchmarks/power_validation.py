"""Validate lotus's power/throughput predictor on a GPU: bench a grid, fit on part, predict the rest.

Read-only, default clocks. For each model, ``lotus power bench`` (the library, not the CLI) measures
batch sizes x tenant counts; the predictor is fitted on a checkerboard of the grid (every batch size and
every tenant count stays in the fit) and predicts the held-out points at their measured SM clock;
leave-one-out errors over the whole grid are reported too. Target: median error <= 10 % for throughput
and for power. Written under ``--out``: power_table.csv (+ .gpu.json), predictions.csv, summary.json,
energy_per_sample.png, predicted_vs_measured.png. Traces and images go to ``--workdir`` (not --out).

    PYTHONPATH=src python3 benchmarks/power_validation.py --out $OUT               # GPU, about 7.5 min
    PYTHONPATH=src python3 benchmarks/power_validation.py --out /tmp/pv --dry-run  # CPU, no NVML, ~2 min

A point that fails keeps its row (with the error); the rest goes on. ``--resume`` skips the points
already measured in ``--out``/power_table.csv. Needs torch, torchvision, numpy, pandas, matplotlib and
nvidia-ml-py (not on --dry-run); not click, rich, natsort, seaborn or ittapi.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from pathlib import Path

_STARTUP_S, _POINT_OVERHEAD_S = 20.0, 3.5  # per group (tenants start), per point (loader, warm-up, sync)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "lotus-power-validation")
    p.add_argument("--models", default="resnet50,resnet18")
    p.add_argument("--batch", default="1,4,16,64,128,256")
    p.add_argument("--tenants", default="1,2,4")
    p.add_argument("--seconds", type=float, default=None, help="window per point (default: from --budget-s)")
    p.add_argument("--budget-s", type=float, default=420.0, help="target total time of the measurements")
    p.add_argument("--deadline-s", type=float, default=500.0, help="skip groups that would end later than this")
    p.add_argument("--data", choices=("cached", "jpeg"), default="cached")
    p.add_argument("--amp", choices=("off", "fp16", "bf16"), default="off")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny images, no NVML (power columns empty)")
    a = p.parse_args(argv)
    if a.dry_run:
        a.models, a.batch, a.tenants = "resnet18", "2,4,8", "1,2"
        a.seconds = a.seconds or 2.0
    return a


def heldout(batches: list[int], tenants: list[int], b: int, n: int) -> bool:
    """The checkerboard: a third of the grid held out, every batch size and tenant count kept in the fit."""
    if b not in batches or n not in tenants:  # a point of another grid (--resume): kept in the fit
        return False
    return (batches.index(b) + tenants.index(n)) % 3 == 1


def measure(a, log) -> tuple:
    import pandas as pd

    from lotus.power.bench import BenchSpec, run_bench
    from lotus.power.table import write_sidecar, write_table

    models, batches, tenants = a.models.split(","), _ints(a.batch), _ints(a.tenants)
    points = len(models) * len(batches) * len(tenants)
    groups = len(models) * len(tenants)
    seconds = a.seconds or max(3.0, min(15.0, (a.budget_s - groups * _STARTUP_S) / points - _POINT_OVERHEAD_S))
    log(f"grid: {points} points in {groups} groups, {seconds:.1f} s per point, about "
        f"{(groups * _STARTUP_S + points * (seconds + _POINT_OVERHEAD_S)) / 60:.1f} min")
    table_path = a.out / "power_table.csv"
    df = pd.read_csv(table_path) if a.resume and table_path.exists() else pd.DataFrame()
    t_start, gpu_docs = time.monotonic(), []
    for model in models:
        for n in tenants:
            done = set()
            if len(df) and "error" in df.columns:
                ok = df[(df["model"] == model) & (df["tenants"] == n) & ~_failed(df)]
                done = set(ok["batch"].astype(int))
            todo = [b for b in batches if b not in done]
            if not todo:
                continue
            eta = _STARTUP_S + len(todo) * (seconds + _POINT_OVERHEAD_S)
            spec = BenchSpec(model=model, batches=tuple(todo), tenants=(n,), seconds=seconds, data_mode=a.data,
                             amp=a.amp, channels_last=a.channels_last, workdir=a.workdir, warmup_s=1.5)
            if a.dry_run:
                spec.device, spec.image_size, spec.images, spec.warmup_s = "cpu", 32, 64, 0.3
            if time.monotonic() - t_start + eta > a.deadline_s:
                rows = [{"model": model, "batch": b, "tenants": n, "error": "skipped: time budget (run with --resume)"}
                        for b in todo]
            else:
                try:
                    rows = run_bench(spec, on_row=lambda r: log(_line(r)), on_gpu=gpu_docs.append).to_dict("records")
                except Exception as exc:  # the group failed as a whole (no GPU...): recorded, the rest goes on
                    rows = [{"model": model, "batch": b, "tenants": n, "error": f"{type(exc).__name__}: {exc}"[:300]}
                            for b in todo]
                    log(f"{model} x {n}: {rows[0]['error']}")
            if len(df) and "error" in df.columns:  # a re-measured point replaces its failed row
                df = df[~((df["model"] == model) & (df["tenants"] == n) & df["batch"].isin(todo))]
            df = pd.concat([df, pd.DataFrame(rows)], ignore_index=True)
            write_table(df, table_path)
    if gpu_docs:
        write_sidecar(table_path, gpu_docs[0])
    return df, seconds, gpu_docs[0] if gpu_docs else None


def _failed(df):
    err = df["error"] if "error" in df.columns else df["model"].map(lambda _: None)
    return err.notna() & (err.astype(str).str.strip() != "")


def _line(r: dict) -> str:
    if r.get("error"):
        return f"  {r['model']} b{r['batch']} x{r['tenants']}: FAILED {r['error']}"
    return (f"  {r['model']} b{r['batch']} x{r['tenants']}: {r['samples_per_s']:.1f} samples/s "
            f"{r.get('power_w', math.nan):.0f} W {r.get('sm_clock_mhz', math.nan):.0f} MHz")


def _errors(values) -> dict:
    import numpy as np

    v = np.abs(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    return {"median_pct": float(np.median(v)) if len(v) else None, "max_pct": float(v.max()) if len(v) else None,
            "n": len(v)}


def validate(df, a, dry: bool) -> tuple[dict, object]:
    import pandas as pd

    from lotus.model.power import fit_power_model
    from lotus.power.table import prediction_table, usable

    ok = usable(df).copy()
    if dry:  # no NVML on a dry run: one nominal clock so that the throughput model can be fitted
        ok["sm_clock_mhz"] = ok["sm_clock_mhz"].fillna(1000.0) if "sm_clock_mhz" in ok else 1000.0
        if "power_w" not in ok:
            ok["power_w"] = math.nan
    batches, tenants = _ints(a.batch), _ints(a.tenants)
    out, preds = {}, []
    for model in a.models.split(","):
        rows = ok[ok["model"] == model]
        res: dict = {"points": int((df["model"] == model).sum()), "measured": len(rows)}
        pairs = zip(rows["batch"].astype(int), rows["tenants"].astype(int), strict=True)
        test_mask = [heldout(batches, tenants, b, n) for b, n in pairs]
        train, test = rows[[not t for t in test_mask]], rows[test_mask]
        try:
            pm = fit_power_model(train, model)
            pt = prediction_table(pm, test).assign(split="held-out")
            res.update(train=len(train), held_out=len(test), fit=pm.to_dict(),
                       throughput_err=_errors(pt.get("samples_per_s_err_pct", [])),
                       power_err=_errors(pt.get("power_w_err_pct", [])))
            loo_x, loo_p = [], []
            for i in range(len(rows)):
                pm_i = fit_power_model(rows.drop(rows.index[i]), model)
                r = prediction_table(pm_i, rows.iloc[[i]])
                loo_x += list(r["samples_per_s_err_pct"])
                loo_p += list(r["power_w_err_pct"])
            res.update(loo_throughput_err=_errors(loo_x), loo_power_err=_errors(loo_p))
            full = fit_power_model(rows, model)
            preds += [pt, prediction_table(full, rows).assign(split="fit-all")]
            res["fit_all"] = full.to_dict()
            med = [res["throughput_err"]["median_pct"], res["power_err"]["median_pct"]]
            res["target_met"] = all(m is not None and m <= 10 for m in med) if not dry else None
        except (ValueError, KeyError) as exc:
            res["error"] = f"{type(exc).__name__}: {exc}"
        out[model] = res
    return out, pd.concat(preds, ignore_index=True) if preds else pd.DataFrame()


def figures(df, preds, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lotus.power.table import usable

    ok = usable(df)
    models = list(dict.fromkeys(ok["model"]))
    written = []
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(6 * max(1, len(models)), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=False):
        rows = ok[ok["model"] == model]
        if "energy_j_per_sample" not in rows or not (rows["energy_j_per_sample"].astype(float) > 0).any():
            ax.text(0.5, 0.5, "no energy measured (no NVML: dry run?)", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_title(model)
            continue
        for n, g in rows.groupby("tenants"):
            g = g.sort_values("batch")
            ax.plot(g["batch"], g["energy_j_per_sample"], "o-", label=f"{n} tenant(s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(title=f"{model}: energy per sample (default clocks)", xlabel="batch size per tenant",
               ylabel="J / sample")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "energy_per_sample.png", dpi=120)
    written.append("energy_per_sample.png")
    plt.close(fig)
    if len(preds):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, (m, p, unit) in zip(axes, (("samples_per_s", "samples_per_s_pred", "samples/s"),
                                           ("power_w", "power_w_pred", "W")), strict=True):
            for (model, split), s in preds.groupby(["model", "split"]):
                ax.scatter(s[m], s[p], marker="o" if split == "held-out" else ".", label=f"{model} {split}",
                           alpha=0.8)
            lim = [min(preds[m].min(), preds[p].min()), max(preds[m].max(), preds[p].max())]
            if all(math.isfinite(float(v)) for v in lim):
                ax.plot(lim, lim, "k--", lw=0.8)
                if lim[0] > 0:
                    ax.set(xscale="log", yscale="log")
            ax.set(xlabel=f"measured ({unit})", ylabel=f"predicted ({unit})", title=m)
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "predicted_vs_measured.png", dpi=120)
        written.append("predicted_vs_measured.png")
        plt.close(fig)
    return written


def main(argv=None) -> int:
    a = _parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s")
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {msg}", flush=True)

    df, seconds, gpu = measure(a, log)
    from lotus.analysis.jsonutil import dumps

    results, preds = validate(df, a, a.dry_run)
    if len(preds):
        preds.to_csv(a.out / "predictions.csv", index=False)
    written = figures(df, preds, a.out)
    import torch

    summary = {"dry_run": a.dry_run, "models": a.models.split(","), "batches": _ints(a.batch),
               "tenants": _ints(a.tenants), "seconds_per_point": seconds, "data": a.data, "amp": a.amp,
               "channels_last": a.channels_last, "clock_mode": "default", "gpu": gpu, "torch": torch.__version__,
               "wall_s": time.monotonic() - t0, "failed_points": int(_failed(df).sum()),
               "split": "checkerboard: (batch index + tenants index) % 3 == 1 held out; held-out points predicted "
                        "at their measured SM clock", "results": results, "figures": written,
               "command": " ".join([Path(sys.executable).name, *sys.argv])}
    (a.out / "summary.json").write_text(dumps(summary))
    for model, r in results.items():
        te, pe = r.get("throughput_err", {}), r.get("power_err", {})
        log(f"{model}: {r.get('measured')} points, held-out throughput error median {te.get('median_pct')} % "
            f"max {te.get('max_pct')} %, power median {pe.get('median_pct')} % max {pe.get('max_pct')} %"
            + (f", error: {r['error']}" if r.get("error") else ""))
    log(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
