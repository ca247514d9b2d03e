"""``lotus analyze gpu``: GPU idle time, the share caused by waiting for data, telemetry, stragglers."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands.analyze import configs_of, data_dir_option, echo_json, ms, pct, writing


@click.command(short_help="GPU idle time and how much of it is waiting for data.")
@data_dir_option
@click.option("--fig-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write per-batch GPU time and telemetry figures (PNG and SVG) here.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (summary and every batch).")
def gpu(data_dir: Path, fig_dir: Path | None, as_json: bool) -> None:
    """GPU idle attributed to data loading (the loader's CUDA events), per-batch distributions,
    NVML telemetry (utilisation, power, energy per sample), and, when a torch.profiler trace of the run
    is in its directory, total GPU idle and a cross-check of the CUDA-event figure against it.
    DDP runs: per rank, and the straggler rank and worker."""
    from lotus.analysis.chrome import read_kineto
    from lotus.analysis.gpu import (
        COLUMNS,
        REPORT_COLUMNS,
        gpu_batches,
        gpu_report,
        kineto_gpu_busy,
        plot_gpu_batches,
        plot_telemetry,
    )

    doc = {"configs": {}}
    for cfg in configs_of(data_dir):
        kineto = {}
        for path in cfg.kineto:
            busy = kineto_gpu_busy(read_kineto(path), path.name)
            if busy.events:
                kineto[busy.rank] = busy
        # a scanned run: a frame of these columns only (the batches' ids for the listing and the figure)
        batches = cfg.batches_of(COLUMNS if as_json or fig_dir is not None else REPORT_COLUMNS)
        report = gpu_report(cfg.events, batches, kineto or None)
        if as_json:
            per = gpu_batches(batches, kineto or None)
            doc["configs"][cfg.name] = {**report, "batches_detail": per.to_dict(orient="records")}
        else:
            _print(cfg.name, report)
        if fig_dir is not None:
            from lotus.analysis.plots import safe_name, save_figure

            tag = safe_name(cfg.name)
            with writing(fig_dir):
                paths = save_figure(plot_gpu_batches(gpu_batches(batches, kineto or None)), fig_dir,
                                    f"gpu_batches_{tag}")
                if (cfg.events["cat"] == "gpu").any():
                    paths += save_figure(plot_telemetry(cfg.events), fig_dir, f"gpu_telemetry_{tag}")
            click.echo("wrote " + ", ".join(str(p) for p in paths), err=as_json)
    if as_json:
        echo_json(doc)


def _dist(d: dict | None) -> str:
    if not d:
        return "-"
    return f"total {ms(d['sum'], 0)}, mean {ms(d['mean'], 0)}, p50 {ms(d['p50'], 0)}, p90 {ms(d['p90'], 0)}, " \
           f"max {ms(d['max'], 0)}"


def _print(name: str, r: dict) -> None:
    click.echo(f"{name}:")
    if r.get("note"):
        click.echo(f"  {r['note']}")
    for rank, v in r["ranks"].items():
        click.echo(f"  rank {rank}: {v['batches']} batches, {v['samples']} samples, "
                   f"loop {ms(v['loop_span_ms'], 0)} ms")
        click.echo(f"    host wait for data (ms): {_dist(v['host_wait_ms'])}  = "
                   f"{pct(v['host_wait_share'])} of the loop")
        if v["cuda_events"]:
            click.echo(f"    GPU idle waiting for data (ms): {_dist(v['gpu_idle_waiting_for_data_ms'])}")
            click.echo(f"    GPU step time (ms): {_dist(v['gpu_step_ms'])}")
            click.echo(f"    data-loading share of GPU time: {pct(v['data_idle_share_of_gpu_time'])}")
        t = v.get("telemetry")
        if t:
            energy = ""
            if t.get("energy_j") is not None:
                per = t.get("energy_per_sample_j")
                energy = f", energy {t['energy_j']:.1f} J" + (f" ({per:.3f} J/sample)" if per else "")
            util = "-" if t["util_pct_mean"] is None else f"{t['util_pct_mean']:.0f}%"
            power = "-" if t["power_w_mean"] is None else f"{t['power_w_mean']:.0f} W"
            click.echo(f"    telemetry ({t['samples']} samples): utilisation {util}, power {power}{energy}")
        k = v.get("kineto")
        if k:
            click.echo(f"    torch.profiler window {ms(k['window_ms'], 0)} ms: GPU idle {ms(k['gpu_idle_ms'], 0)} ms "
                       f"({pct(k['gpu_idle_share'])}); during the loop's waits "
                       f"{ms(k.get('idle_during_waits_ms'), 0)} ms")
            if k.get("agreement_mean_pct_of_step") is not None:
                click.echo(f"    CUDA events vs profiler, {k['batches_compared']} batches: mean |diff| "
                           f"{ms(k['abs_diff_ms']['mean'], 0)} ms = {k['agreement_mean_pct_of_step']:.2f}% of a step")
    s = r.get("straggler")
    if s:
        w = s.get("slowest_worker") or {}
        worker = f"; its slowest worker {w['worker_id']} ({ms(w['mean_prep_ms'], 0)} ms per batch)" if w else ""
        click.echo(f"  straggler: rank {s['rank']} waited {pct(s['host_wait_share'])} of its loop for data "
                   f"(other ranks {pct(s['other_ranks_mean_wait_share'])}){worker}")
    click.echo("")
