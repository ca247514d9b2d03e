"""``lotus power``: GPU power and energy: bench tables, a throughput/power predictor, a plan under a cap.

Read-only: lotus measures, predicts and plans; it never changes clocks, power limits, compute mode or MPS.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import click


def _ints(ctx, param, value):
    if value is None:
        return None
    try:
        out = tuple(int(v) for v in str(value).replace(" ", "").split(",") if v)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected integers, e.g. 1,8,32") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{value!r}: expected positive integers")
    return out


def _fmt(v, spec: str, unit: str = "") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:{spec}}{unit}"


def _echo_row(r: dict) -> None:
    head = f"{r['model']} batch {_fmt(r.get('batch'), '.0f')} x {r['tenants']} tenant(s)"
    if r.get("error"):
        click.echo(f"{head}: failed: {r['error']}", err=True)
        return
    click.echo(f"{head}: {_fmt(r.get('samples_per_s'), '.1f')} samples/s,"
               f" p50 {_fmt(r.get('latency_p50_ms'), '.2f')} ms, p99 {_fmt(r.get('latency_p99_ms'), '.2f')} ms,"
               f" {_fmt(r.get('power_w'), '.0f')} W,"
               f" {_fmt(r.get('energy_j_per_sample'), '.4f')} J/sample, SM {_fmt(r.get('sm_clock_mhz'), '.0f')} MHz,"
               f" data wait {_fmt(r.get('gpu_idle_from_data_share', r.get('data_wait_share')), '.0%')}")


@click.group("power")
def power() -> None:
    """GPU power and energy: bench, predict and plan under a power cap (read-only).

    \b
    lotus power bench -m resnet50 --batch 1,8,32,128 --tenants 1,2,4 --out rn50.csv
    lotus power predict --table rn50.csv --batch 32 --tenants 2 [--clock 1410]
    lotus power plan --table rn50.csv --power-cap 250
    """


@power.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-m", "--model", default=None,
              help="torchvision model, weights=None (default resnet50); with -- COMMAND: the rows' model name.")
@click.option("--batch", "batches", callback=_ints, default="1,8,32,128", show_default=True, help="Batch sizes.")
@click.option("--tenants", callback=_ints, default="1,2,4", show_default=True,
              help="Processes sharing the GPU (time-sliced, or under MPS when it already runs).")
@click.option("--seconds", type=click.FloatRange(0.5), default=10.0, show_default=True,
              help="Measured window per point.")
@click.option("--images", type=click.IntRange(1), default=256, show_default=True, help="Generated JPEG images.")
@click.option("--image-size", type=click.IntRange(8), default=224, show_default=True, help="Crop side (pixels).")
@click.option("--data", "data_mode", type=click.Choice(["cached", "jpeg"]), default="cached", show_default=True,
              help="cached: decoded once, tensors from memory (measures the GPU); jpeg: decoded every batch.")
@click.option("--workers", type=click.IntRange(0), default=None, help="DataLoader workers per tenant.")
@click.option("--amp", type=click.Choice(["off", "fp16", "bf16"]), default="off", show_default=True)
@click.option("--channels-last", is_flag=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Table (.csv or .parquet; default WORKDIR/power.csv).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Traces, tenant results and the generated images (default lotus-runs/power-<model>-<time>/).")
@click.option("--gpu", "gpu_index", type=click.IntRange(0), default=None, help="NVML index of the GPU.")
@click.option("--clock-label", default="default", show_default=True,
              help="clock_mode of the rows ('default': the GPU chose; label your own set clocks, e.g. lgc-1410).")
@click.option("--mps-percentage", type=click.FloatRange(1, 100), default=None,
              help="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of each tenant (MPS must already run; lotus never starts it).")
@click.option("--interval-ms", type=click.FloatRange(10), default=75, show_default=True, help="NVML sampling period.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=None,
              help="With -- COMMAND: stop each copy after this many seconds.")
@click.option("--cpu", is_flag=True, help="Dry run on the CPU (no GPU, no NVML: power columns empty).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def bench(model, batches, tenants, seconds, images, image_size, data_mode, workers, amp, channels_last, out, workdir,
          gpu_index, clock_label, mps_percentage, interval_ms, timeout_s, cpu, command) -> None:
    """Throughput, latency p50/p99, power and energy per sample over batch sizes x tenants.

    With `-- COMMAND`, benchmarks that command instead (one copy per tenant, NVML around it,
    throughput from its lotus trace). Needs an NVIDIA GPU and NVML (nvidia-ml-py).
    """
    from lotus.errors import LotusError
    from lotus.power.bench import BenchSpec, run_bench
    from lotus.power.nvml import mps_status
    from lotus.power.table import write_sidecar, write_table

    if mps_percentage is not None and not cpu and not mps_status()["mps"]:
        raise LotusError("--mps-percentage: no MPS control daemon runs for this user, and lotus never starts one")
    from lotus.launch.options import script_name

    name = model or (script_name(list(command)) if command else "resnet50")
    workdir = workdir or Path("lotus-runs") / f"power-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = out or workdir / "power.csv"
    spec = BenchSpec(model=name, batches=batches, tenants=tenants, seconds=seconds, images=images,
                     image_size=image_size, data_mode=data_mode, workers=workers, amp=amp, channels_last=channels_last,
                     device="cpu" if cpu else "cuda", gpu_index=gpu_index, workdir=workdir,
                     interval_s=interval_ms / 1e3, clock_label=clock_label, mps_percentage=mps_percentage)
    gpu_docs: list = []
    if command:
        from lotus.power.command import run_command_bench

        df = run_command_bench(list(command), spec, name=name, timeout_s=timeout_s, on_row=_echo_row,
                               on_gpu=gpu_docs.append)
    else:
        df = run_bench(spec, on_row=_echo_row, on_gpu=gpu_docs.append)
    write_table(df, out)
    if gpu_docs:
        write_sidecar(out, gpu_docs[0])
    failed = int((df["error"].astype(str).str.len() > 0).sum()) if "error" in df.columns else 0
    click.echo(f"lotus power bench: {len(df) - failed} point(s) measured, {failed} failed; table {out}")


def _load(tables, model):
    from lotus.power.table import fit_models, read_tables

    df = read_tables(tables)
    return df, *fit_models(df, model, tables[0] if len(tables) == 1 else ", ".join(map(str, tables)))


_table_opt = click.option("--table", "tables", multiple=True, required=True,
                          type=click.Path(dir_okay=False, path_type=Path), help="Bench table(s), CSV or Parquet.")


@power.command()
@_table_opt
@click.option("-m", "--model", default=None, help="Model of the table (needed when it holds several).")
@click.option("--batch", "batches", callback=_ints, required=True, help="Batch size(s) per tenant.")
@click.option("--tenants", callback=_ints, default="1", show_default=True, help="Tenant count(s).")
@click.option("--clock", "clock_mhz", type=click.FloatRange(1), default=None,
              help="SM clock (MHz); default: the clock the GPU chose at the nearest measured point.")
@click.option("--share", "share_pct", type=click.FloatRange(1, 100), default=None,
              help="Share per tenant (%%; default 100/tenants).")
@click.option("--mps", is_flag=True, help="Predict under MPS (uses MPS rows of the table when there are any).")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
def predict(tables, model, batches, tenants, clock_mhz, share_pct, mps, as_json) -> None:
    """Predicted throughput, power and energy per sample for batch sizes x tenants (x a clock)."""
    from dataclasses import asdict

    from lotus.analysis.jsonutil import dumps

    _, ts, ms = _load(tables, model)
    pm = (ms or ts) if mps else (ts or ms)
    out = []
    for n in tenants:
        for b in batches:
            share = share_pct / 100 if share_pct else 1.0 / n
            clock = clock_mhz if clock_mhz is not None else pm.default_clock_mhz(b, n)
            from lotus.model.power import TenantLoad

            pr = pm.predict_mix([TenantLoad(b, share)] * n, clock, mps=mps)
            out.append({"model": pm.model, "batch": b, "tenants": n, "share": share,
                        "sharing": "mps" if mps else "time-sliced", **asdict(pr)})
    if as_json:
        click.echo(dumps({"predictions": out, "fit": pm.to_dict()}))
        return
    for r in out:
        click.echo(f"{r['model']} batch {r['batch']} x {r['tenants']} ({r['sharing']}, share {r['share']:.0%}) at "
                   f"{r['clock_mhz']:.0f} MHz: {r['samples_per_s']:.1f} samples/s, {_fmt(r['power_w'], '.1f')} W, "
                   f"{_fmt(r['energy_j_per_sample'], '.4f')} J/sample, batch time {r['batch_period_ms'][0]:.2f} ms")
    _echo_fit(pm)


def _echo_fit(pm) -> None:
    e = pm.fit_error
    thr, pw = e.get("throughput", {}), e.get("power", {})
    click.echo(f"fit: {pm.rows} rows, throughput error median {_fmt(thr.get('median_pct'), '.1f')} % "
               f"(max {_fmt(thr.get('max_pct'), '.1f')} %), power median {_fmt(pw.get('median_pct'), '.1f')} % "
               f"(max {_fmt(pw.get('max_pct'), '.1f')} %); clock dependence "
               f"{'fitted' if pm.clock_fitted else 'from priors (the table spans one clock)'}")


@power.command()
@_table_opt
@click.option("-m", "--model", default=None, help="Model of the table (needed when it holds several).")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
def fit(tables, model, as_json) -> None:
    """The fitted parameters of the predictor and its errors on the table's rows."""
    from lotus.analysis.jsonutil import dumps

    _, ts, ms = _load(tables, model)
    if as_json:
        click.echo(dumps({"time_sliced": ts.to_dict() if ts else None, "mps": ms.to_dict() if ms else None}))
        return
    for pm in (ts, ms):
        if pm is not None:
            click.echo(f"{pm.model} ({'mps' if pm.mps else 'time-sliced'}): {pm.throughput}")
            click.echo(f"  {pm.power}")
            _echo_fit(pm)



def _clocks(spec: str, tables, df, gpu_index: int) -> tuple[list[float] | None, tuple | None, str]:
    """(supported SM clocks, power-limit range, where from): --clocks, the bench's sidecar, NVML of this
    machine when it is the table's GPU, else the table."""
    from lotus.power.table import read_sidecar

    if spec not in ("auto", "table"):
        try:
            return [float(c) for c in spec.split(",") if c.strip()], None, "--clocks"
        except ValueError:
            raise click.BadParameter(f"{spec!r}: expected auto, table or MHz values (1005,1410)") from None
    if spec == "table":
        return None, None, "the table"
    names = set(df["gpu_name"].dropna().astype(str)) - {""} if "gpu_name" in df.columns else set()
    side = read_sidecar(tables[0])
    if side and side.get("supported_sm_clocks_mhz"):
        return side["supported_sm_clocks_mhz"], side.get("power_limit_range_w"), f"{tables[0]}.gpu.json"
    try:
        from lotus.power.nvml import gpu_info, load_nvml, pick_gpu

        nv = load_nvml()
        info = gpu_info(nv, *pick_gpu(nv, gpu_index))
        if info.supported_sm_clocks_mhz and (not names or info.name in names):
            return list(info.supported_sm_clocks_mhz), info.power_limit_range_w, "NVML"
    except Exception:  # no GPU here: the table's clocks
        pass
    return None, None, "the table"


@power.command()
@_table_opt
@click.option("--power-cap", "cap_w", type=click.FloatRange(1), required=True, help="Power cap (W).")
@click.option("-m", "--model", default=None, help="Model of the table (needed when it holds several).")
@click.option("--max-tenants", type=click.IntRange(1), default=None, help="Default: the most the table measured.")
@click.option("--clocks", "clock_spec", default="auto", show_default=True,
              help="SM clocks to consider: auto (bench sidecar, else NVML read-only, else the table), table, "
                   "or MHz values (1005,1410,1980).")
@click.option("--sharing", type=click.Choice(["both", "time-sliced", "mps"]), default="both", show_default=True)
@click.option("--quantum", "quantum_pct", type=click.IntRange(1, 100), default=10, show_default=True,
              help="MPS share step (%%) of the greedy partitioning.")
@click.option("--gpu", "gpu_index", type=click.IntRange(0), default=0, show_default=True,
              help="GPU index in the printed nvidia-smi commands (and for the NVML clock query).")
@click.option("--tenant-command", default="<your inference command, batch size {batch}>", show_default=True,
              help="Printed per tenant; {batch} is replaced.")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
def plan(tables, cap_w, model, max_tenants, clock_spec, sharing, quantum_pct, gpu_index, tenant_command,
         as_json) -> None:
    """The configuration with the highest predicted throughput under --power-cap, and the commands a
    privileged user would run to apply it (lotus runs none of them)."""
    from lotus.analysis.jsonutil import dumps
    from lotus.errors import InputError
    from lotus.power.plan import format_plan, make_plan

    df, ts, ms = _load(tables, model)
    clocks, limits, source = _clocks(clock_spec, tables, df, gpu_index)
    modes = ("time-sliced", "mps") if sharing == "both" else (sharing,)
    if ts is None and "time-sliced" in modes:  # only MPS rows: plan MPS
        modes = ("mps",)
    try:
        p = make_plan(ts or ms, cap_w, supported_clocks=clocks, max_tenants=max_tenants, sharing=modes, table=df,
                      quantum_pct=quantum_pct, gpu_index=gpu_index, power_limit_range_w=limits,
                      tenant_command=tenant_command, mps_model=ms)
    except ValueError as exc:
        raise InputError(str(exc), tables[0]) from None
    if as_json:
        click.echo(dumps({**p.to_dict(), "clocks_from": source}))
    else:
        for line in format_plan(p, clocks_from=source):
            click.echo(line)
