"""``lotus analyze``: statistics, wait/delay and verdicts of traced runs.

A click group. ``stats``, ``wait`` and ``verdict`` are defined here; a subcommand living in its own
module is added by one line in :data:`SUBCOMMANDS` (imported only when it runs), e.g.
``"gpu": ("lotus.commands.analyze_gpu:gpu", "GPU idle time and its causes.")``.

The helpers at the bottom (``data_dir_option``, ``echo_json``, ``ms``...) are shared by the other
analysis commands (viz, plot, report, diff, export, info).
"""

from __future__ import annotations

import contextlib
import functools
import math
from pathlib import Path

import click

from lotus.cli import LazyGroup

# name -> (module:attribute, one-line help); imported only when that subcommand runs
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "gpu": ("lotus.commands.analyze_gpu:gpu", "GPU idle time and how much of it is waiting for data."),
    "throughput": ("lotus.commands.analyze_throughput:throughput_cmd",
                   "Steady-state samples/s with its 95% interval, and what was left out."),
    "ranks": ("lotus.commands.analyze_ranks:ranks_cmd",
              "Stragglers across ranks and nodes: who holds the others back, and why."),
}


# -- shared helpers ----------------------------------------------------------------------------------
def data_dir_option(f):
    """``--data-dir``, plus ``--jobs`` and ``--cluster`` (where a large run is scanned: lotus.query.parallel)."""

    @functools.wraps(f)
    def command(*args, jobs=None, cluster=None, **kwargs):
        if jobs is None and cluster is None:
            return f(*args, **kwargs)
        from lotus.query import settings

        with settings(jobs=jobs, cluster=cluster):
            return f(*args, **kwargs)

    command = click.option("--cluster", metavar="ADDRESS", default=None,
                           help="Scan large runs on a running Dask cluster (tcp://HOST:8786) whose workers see the "
                                "trace files at the same paths [$LOTUS_CLUSTER].")(command)
    command = click.option("--jobs", "-j", type=click.IntRange(min=0), default=None, metavar="N",
                           help="Processes scanning a large run (0: every core; 1: this process only) "
                                "[$LOTUS_JOBS; default: every core for runs over 64 MiB].")(command)
    return click.option("--data-dir", "-d", required=True, type=click.Path(path_type=Path),
                        help="A run directory, or a directory of runs (each run is a config).")(command)


def echo_json(obj) -> None:
    from lotus.analysis.jsonutil import dumps

    click.echo(dumps(obj))


def ms(v, width: int = 9) -> str:
    """A duration in ms, right-aligned, 3 significant digits at least; ``-`` when unknown (None, NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    if abs(v) >= 1000:
        return f"{v:,.0f}".rjust(width)
    return f"{v:.3g}".rjust(width) if abs(v) >= 1 else f"{v:.3f}".rjust(width)


def pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


@contextlib.contextmanager
def writing(path):
    """Turn an OSError while writing outputs into a one-line error naming ``path``."""
    from lotus.errors import LotusError

    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        raise LotusError(f"cannot write {where}: {exc.strerror or exc}") from None


def echo_outcomes(outcomes: dict, *, dispatched: bool = False, lead: str = "not in these numbers") -> None:
    """One line on failed batches and exhausted fetches (nothing when there were none)."""
    from lotus.analysis.info import outcome_note

    note = outcome_note(outcomes, dispatched=dispatched)
    if note:
        click.echo(f"  {lead}: {note}")


def configs_of(data_dir: Path, engine: str = "auto", summary_only: bool = False, census: bool = False):
    """Configs of ``data_dir``; a large run is scanned (``engine="auto"``: the commands' default, bounded
    memory; ``"memory"`` only for one that needs every event in one DataFrame); ``summary_only`` for the
    commands that read only ``cfg.summary_batches`` (less memory per batch); ``census`` for ``lotus
    info`` (every record counted on a scanned run)."""
    from lotus.analysis.runs import iter_configs

    return iter_configs(data_dir, engine=engine, summary_only=summary_only, census=census)


def per_config(data_dir: Path, compute, show, as_json: bool, key: str = "configs", configs=None, **kw) -> dict:
    """``{key: {config: compute(cfg)}}`` over the configs of ``data_dir`` (``kw``: :func:`configs_of`'s; or over
    ``configs``, any objects with a ``name``); each result shown with ``show(name, result)`` as it comes, or the
    whole document printed as JSON."""
    doc: dict = {key: {}}
    for cfg in configs_of(data_dir, **kw) if configs is None else configs:
        doc[key][cfg.name] = result = compute(cfg)
        if not as_json:
            show(cfg.name, result)
    if as_json:
        echo_json(doc)
    return doc


# -- the group ----------------------------------------------------------------------------------------
@click.group(cls=LazyGroup, lazy=SUBCOMMANDS)
def analyze() -> None:
    """Statistics, wait/delay and verdicts of traced runs (lotus traces and original LotusTrace logs)."""


_STAT_COLS = ("count", "mean", "std", "std_pct", "median", "p25", "p75", "p90", "p99", "min", "max", "sum")


@analyze.command(short_help="Batch preprocessing and per-op time statistics (ms).")
@data_dir_option
@click.option("--remove-outliers", is_flag=True,
              help="Drop batches whose preprocessing time is below q1 - 2*IQR (the last, partial batch).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table: .csv (one row per config and op) or .json.")
@click.option("--per-rank", is_flag=True, help="Also give batch preprocessing statistics per rank (DDP).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def stats(data_dir: Path, remove_outliers: bool, output: Path | None, per_rank: bool, as_json: bool) -> None:
    """Batch preprocessing and per-op time statistics (ms) per config."""
    from lotus.analysis.stats import config_stats, preprocessing_stats, stats_table

    result = {}
    ranks = {}
    for cfg in configs_of(data_dir, summary_only=True):
        result[cfg.name] = config_stats(cfg.events, cfg.summary_batches, remove_outliers=remove_outliers)
        if per_rank:
            ranks[cfg.name] = preprocessing_stats(cfg.summary_batches, remove_outliers=remove_outliers, by="rank")
        if not as_json:
            _print_stats(cfg.name, result[cfg.name], ranks.get(cfg.name))
    doc = {"configs": {name: {"batch_preprocessing_ms": st["batch_preprocessing_ms"], "ops_ms": st["ops_ms"],
                              "outliers_removed": st["outliers_removed"], "outcomes": st["outcomes"]}
                       for name, st in result.items()}}
    for name, per in ranks.items():
        doc["configs"][name]["per_rank"] = {r: {"batch_preprocessing_ms": d} for r, d in per.items()}
    if as_json:
        echo_json(doc)
    if output is not None:
        with writing(output):
            output.parent.mkdir(parents=True, exist_ok=True)
            if output.suffix == ".json":
                from lotus.analysis.jsonutil import dumps

                output.write_text(dumps(doc) + "\n")
            else:
                stats_table(result).to_csv(output, index=False, float_format="%.6g")
        click.echo(f"wrote {output}", err=as_json)


def _print_stats(name: str, st: dict, per_rank: dict | None = None) -> None:
    b = st["batch_preprocessing_ms"]
    note = f"; {st['outliers_removed']} outlier batch(es) removed" if st["outliers_removed"] else ""
    click.echo(f"{name}  ({b['count']} batches{note}; times in ms per batch, per sample for load and "
               "transform ops, per batch for collate)")
    head = "".join(c.replace("std_pct", "std%").rjust(9 if c != "count" else 8) for c in _STAT_COLS)
    click.echo(f"  {'':22}{head}")
    rows = [("batch preprocessing", b), *st["ops_ms"].items()]
    for label, d in rows:
        cells = []
        for c in _STAT_COLS:
            v = d.get(c)
            if c == "count":
                cells.append(str(v).rjust(8))
            elif c == "std_pct":
                cells.append(("-" if v is None else f"{v:.0f}%").rjust(9))
            else:
                cells.append(ms(v))
        click.echo(f"  {label[:22]:22}{''.join(cells)}")
    for rank, d in (per_rank or {}).items():
        click.echo(f"  {'  rank ' + str(rank):22}{str(d['count']).rjust(8)}{ms(d['mean'])}{ms(d['std'])}{'':9}"
                   f"{ms(d['median'])}{ms(d['p25'])}{ms(d['p75'])}{ms(d['p90'])}{ms(d['p99'])}{ms(d['min'])}"
                   f"{ms(d['max'])}{ms(d['sum'])}")
    echo_outcomes(st["outcomes"])
    click.echo("")


@analyze.command(short_help="Wait per batch, delay, head-of-line blocking.")
@data_dir_option
@click.option("--sort", type=click.Choice(["batch_id", "duration"]), default="batch_id", show_default=True,
              help="Order of the per-batch listing and of the wait figure.")
@click.option("--fig-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write wait and delay figures (PNG and SVG) here.")
@click.option("--top", type=int, default=10, show_default=True, help="Batches listed per config.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (summary and every batch).")
def wait(data_dir: Path, sort: str, fig_dir: Path | None, top: int, as_json: bool) -> None:
    """Training-loop wait per batch, delay, and head-of-line blocking (in_order=False estimate)."""
    from lotus.analysis.wait import wait_stats, wait_table
    from lotus.query import outcome_summary

    doc = {"configs": {}}
    for cfg in configs_of(data_dir, summary_only=fig_dir is None):
        summary = wait_stats(cfg.summary_batches)
        table = wait_table(cfg.summary_batches, sort=sort) if summary["known"] else None
        outcomes = outcome_summary(cfg.summary_batches)
        if as_json:
            doc["configs"][cfg.name] = {**summary, "outcomes": outcomes, "batches_detail": [] if table is None else
                                        table.to_dict(orient="records")}
        else:
            _print_wait(cfg.name, summary, table, top, sort, outcomes)
        if fig_dir is not None:
            from lotus.analysis import plotdata
            from lotus.analysis.plots import delay_plot, safe_name, save_figure, wait_plot

            tag = safe_name(cfg.name)
            with writing(fig_dir):
                paths = save_figure(wait_plot(plotdata.wait_frame(cfg.summary_batches, sort=sort), sort=sort,
                                              title=cfg.name), fig_dir, f"wait_{tag}")
                paths += save_figure(delay_plot(plotdata.delay_frame(cfg.summary_batches), title=cfg.name), fig_dir,
                                     f"delay_{tag}")
            click.echo("wrote " + ", ".join(str(p) for p in paths), err=as_json)
    if as_json:
        echo_json(doc)


def _print_wait(name: str, s: dict, table, top: int, sort: str, outcomes: dict) -> None:
    d = s["delay_ms"]
    delay = f"delay (ms): median {ms(d['median'], 0)}, p90 {ms(d['p90'], 0)}, max {ms(d['max'], 0)}"
    if not s["known"]:
        click.echo(f"{name}: wait unknown ({s['reason']}); {s['batches']} batches consumed; {delay}")
        echo_outcomes(outcomes)
        click.echo("")
        return
    b, w, h = s["buckets"], s["wait_ms"], s["head_of_line"]
    click.echo(f"{name}: {s['batches']} batches")
    click.echo(f"  already buffered {pct(b['buffered'])} | 1 us - 1 ms {pct(b['up_to_1ms'])} | "
               f"> 1 ms {pct(b['over_1ms'])} | > 500 ms {pct(b['over_500ms'])}")
    click.echo(f"  wait (ms): total {ms(w['sum'], 0)}, mean {ms(w['mean'], 0)}, median {ms(w['median'], 0)}, "
               f"p90 {ms(w['p90'], 0)}, max {ms(w['max'], 0)}")
    click.echo(f"  {delay}")
    click.echo(f"  head-of-line blocking: {ms(h['blocked_ms'], 0)} ms over {h['blocked_batches']} batches "
               f"({pct(h['blocked_share_of_wait'])} of the wait); in_order=False would save about "
               f"{ms(h['in_order_false_saving_ms'], 0)} ms ({pct(h['in_order_false_saving_share'])})")
    if top > 0 and table is not None and len(table):
        click.echo(f"  {'by longest wait' if sort == 'duration' else 'first batches'}:")
        click.echo("    rank epoch batch worker   wait ms  delay ms  blocked ms  buffered")
        for r in table.head(top).itertuples():
            worker = "-" if r.worker_id != r.worker_id else str(int(r.worker_id))
            click.echo(f"    {r.rank:4d} {r.epoch:5d} {r.batch_id:5d} {worker:>6} {ms(r.wait_ms)} {ms(r.delay_ms)} "
                       f"{ms(r.hol_blocked_ms, 11)}  {'yes' if r.buffered else 'no'}")
    echo_outcomes(outcomes)
    click.echo("")


@analyze.command("verdict", short_help="Input-bound or not, where, and what to change.")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--per-rank", is_flag=True, help="Also show the wait share of every rank (DDP).")
@click.option("--fail-if-input-bound", "fail_fraction", type=click.FloatRange(0, 1), default=None,
              metavar="FRACTION", help="Exit with code 3 when a config waits more than FRACTION of its loop time "
              "(e.g. 0.05), to gate CI.")
def verdict_cmd(data_dir: Path, as_json: bool, per_rank: bool, fail_fraction: float | None) -> None:
    """Is the input pipeline the bottleneck, where, and what to change."""
    from lotus.analysis.diagnosis import verdict

    doc = {"configs": {}}
    failed = []
    for cfg in configs_of(data_dir, summary_only=True):
        v = verdict(cfg.events, cfg.summary_batches, loaders=cfg.loaders)
        doc["configs"][cfg.name] = v
        if fail_fraction is not None and v["wait_share"] is not None and v["wait_share"] > fail_fraction:
            failed.append(cfg.name)
        if not as_json:
            _print_verdict(cfg.name, v, per_rank)
    if as_json:
        doc["failed"] = failed if fail_fraction is not None else None
        echo_json(doc)
    if failed:
        click.echo(f"lotus: input-bound above {fail_fraction:.1%}: {', '.join(failed)}", err=True)
        raise click.exceptions.Exit(3)


def _print_verdict(name: str, v: dict, per_rank: bool) -> None:
    if v["wait_share"] is None:
        click.echo(f"{name}: UNKNOWN - no wait events, so the loop's waiting time is unknown "
                   f"({v['batches']} batches consumed)")
    else:
        click.echo(f"{name}: {v['class'].upper()} - the loop waited {pct(v['wait_share'])} of "
                   f"{v['loop_s']:.3g} s for data ({v['batches']} batches)")
    if v.get("steady_wait_share") is not None and v.get("startup_wait_s"):
        click.echo(f"  steady state (first batch of each epoch left out): waited {pct(v['steady_wait_share'])} "
                   f"({v['steady_class']}); start-up waits {v['startup_wait_s']:.3g} s")
    if per_rank and v["per_rank"]:
        click.echo("  per rank: " + ", ".join(f"rank {r} {pct(d['wait_share'])}" for r, d in v["per_rank"].items()))
    slow = v["slowest_op"]
    if slow:
        sampled = ""
        if slow.get("sampled_share") is not None:  # per-op detail for a share of the batches (detail budget)
            ci = slow.get("mean_ci95_ms")
            sampled = (f" (estimated from {pct(slow['sampled_share'])} of batches"
                       + (f"; mean 95% CI {ci[0]:.3g} .. {ci[1]:.3g} ms" if ci else "") + ")")
        click.echo(f"  slowest op: {slow['name']}, {slow['mean_ms']:.3g} ms per call, "
                   f"{pct(slow['share_of_preprocessing'])} of preprocessing time{sampled}")
    wk = v["workers"]
    if wk["count"]:
        each = ", ".join(f"{k} {pct(s)}" for k, s in list(wk["per_worker"].items())[:16])
        more = " ..." if wk["count"] > 16 else ""
        click.echo(f"  workers: {wk['count']}, busy {pct(wk['mean_busy_share'])} on average ({each}{more})")
    echo_outcomes(v.get("outcomes") or {})
    if v["suggestions"]:
        click.echo("  suggestions:")
        for s in v["suggestions"]:
            click.echo(f"    - {s['text']}")
    click.echo("")
