"""``lotus whatif``: predicted samples/s, wait share and bottleneck for other workers, CPUs and cache sizes."""

from __future__ import annotations

import math
from pathlib import Path

import click

from lotus.commands._params import rate_text
from lotus.commands.analyze import echo_json, writing


def _list(kind):
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            out = [kind(v) for v in str(value).replace(" ", "").split(",") if v]
        except ValueError:
            raise click.BadParameter(f"expected a comma-separated list of numbers, not {value!r}") from None
        if not out or any(v < 0 for v in out):
            raise click.BadParameter(f"expected numbers >= 0, not {value!r}")
        return out

    return parse


@click.command()
@click.option("--data-dir", "-d", "data_dirs", required=True, multiple=True, type=click.Path(path_type=Path),
              help="A traced run; repeat for other runs of the same job (other workers or CPUs): one model of "
                   "them all, each run checked by the model of the others. The first is the traced setting.")
@click.option("--workers", callback=_list(int), help="num_workers to predict, e.g. 0,2,4,8 (default 0..2x CPUs).")
@click.option("--cpus", callback=_list(float), help="CPU counts, e.g. 2,4,8 (default 1..the traced CPUs).")
@click.option("--batch-size", type=click.IntRange(min=1), help="Batch size (default: the traced one).")
@click.option("--cache-gb", callback=_list(float), help="Page-cache sizes in GB (10^9 bytes), e.g. 0,8,32.")
@click.option("--dataset-bytes", type=float, help="Size of the dataset in bytes (for --cache-gb).")
@click.option("--data", type=click.Path(path_type=Path),
              help="Directory of the dataset's files: bytes per sample from a random sample of them; where the "
                   "traced workers read from storage, the files are also read at each worker count (--replay-s).")
@click.option("--replay-s", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="With --data: seconds of reading the dataset's files at each worker count (0: none).")
@click.option("--shm-probe/--no-shm-probe", default=True, show_default=True,
              help="From a num_workers=0 trace: measure here what a batch's bytes cost the worker path (shared "
                   "memory) and price it into the predictions with workers.")
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True,
              help="Epochs of the cache simulation.")
@click.option("--cold-data-dir", type=click.Path(path_type=Path),
              help="A run of the same job with a cold page cache: measures the cost of reading from disk.")
@click.option("--io-mb-s", type=click.FloatRange(min=0, min_open=True),
              help="Disk throughput (MB/s) for reads that miss the cache, if no cold run was traced.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--fig", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the cache figure (hit rate and samples/s vs cache size) to this file (.png, .svg).")
def whatif(data_dirs: tuple[Path, ...], workers, cpus, batch_size, cache_gb, dataset_bytes, data, replay_s,
           shm_probe, epochs, cold_data_dir, io_mb_s, as_json: bool, fig: Path | None) -> None:
    """Fit a throughput model on a traced run and predict other configurations (see docs/model.md)."""
    from lotus.errors import InputError
    from lotus.model.report import whatif as run_whatif

    if dataset_bytes is not None and data is not None:
        raise click.UsageError("give --dataset-bytes or --data, not both")
    data_dir = data_dirs[0]
    w = run_whatif(data_dir, more_dirs=data_dirs[1:], workers=workers, cpus=cpus, batch_size=batch_size,
                   cache_gb=cache_gb, dataset_bytes=dataset_bytes, data=data, epochs=epochs, cold_dir=cold_data_dir,
                   io_mb_s=io_mb_s, replay_s=replay_s, shm_probe=shm_probe)
    if fig is not None:
        if w.cache is None:
            raise InputError("no cache figure: the cache what-if needs the dataset's size (--dataset-bytes or "
                             "--data) and a trace with sample indices")
        from lotus.model.plots import cache_figure

        with writing(fig):
            fig.parent.mkdir(parents=True, exist_ok=True)
            cache_figure(w.cache, title=f"{data_dir.name}: cache what-if").savefig(fig, dpi=120)
    if as_json:
        echo_json(w.to_dict())
    else:
        _print(w)
    if fig is not None:
        click.echo(f"wrote {fig}", err=as_json)


def _num(v, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _print_check(chk) -> None:
    """Each run against the model of the others (several runs)."""
    pi = f", prediction interval +-{chk.prediction_interval:.0%}" if chk.prediction_interval is not None else ""
    held = {True: "holds", False: "does NOT hold", None: "not checked"}[chk.holds]
    click.echo(f"runs checked by the model of the others: the model {held}{pi}")
    for c in chk.probes:
        ci = f" (95% CI {c.ci95[0]:,.0f}-{c.ci95[1]:,.0f})" if c.ci95 else ""
        got = (f"predicted {c.loo_predicted:,.0f} ({c.loo_error:+.1%}, tolerance +-{c.tolerance:.0%})"
               if c.loo_error is not None else "not predicted")
        click.echo(f"  {c.name}: measured {_num(c.samples_per_s)}{ci}, {got}{' DISAGREES' if c.disagrees else ''}")


def _print(w) -> None:
    m = w.measured
    cpus = _num(m["cpus"], "{:g}")
    click.echo(f"traced: num_workers={m['num_workers']} cpus={cpus} batch_size={m['batch_size']} "
               f"prefetch_factor={m['prefetch_factor']}: measured {rate_text(m['samples_per_s'], m.get('ci95'))} "
               f"(wait {_num(m['wait_share'], '{:.1%}')}), model {_num(m['predicted_samples_per_s'])} samples/s "
               f"(wait {_num(m['predicted_wait_share'], '{:.1%}')}), bottleneck: {m['bottleneck']}")
    if m.get("note"):
        click.echo(f"note: measured: {m['note']}")
    if w.check is not None:
        _print_check(w.check)
    t = w.predictions
    has_cache = t["cache_gb"].notna().any()
    head = f"{'workers':>7} {'cpus':>5} " + (f"{'cache GB':>8} {'hit':>6} " if has_cache else "") + \
        f"{'samples/s':>10} {'wait':>6}  bottleneck"
    click.echo(head)
    for r in t.itertuples(index=False):
        cells = f"{r.num_workers:>7} {_num(r.cpus, '{:g}'):>5} "
        if has_cache:
            cells += f"{_num(r.cache_gb, '{:g}'):>8} {_num(r.cache_hit_rate, '{:.0%}'):>6} "
        tail = r.bottleneck if r.samples_per_s is not None else f"({r.reason})"
        rate = {"upper": "<=", "lower": ">="}.get(r.bound, "") + _num(r.samples_per_s)
        click.echo(cells + f"{rate:>10} {_num(r.wait_share, '{:.1%}'):>6}  {tail}")
    if w.cache is not None:
        lru = w.cache[w.cache["policy"] == "lru"]
        st = w.cache[w.cache["policy"] == "static"]
        click.echo(f"cache what-if ({w.dataset['dataset_bytes'] / 1e9:.3g} GB dataset; steady hit rate, samples/s "
                   f"at the traced config):")
        click.echo(f"  {'cache':>6} {'GB':>8} {'LRU hit':>8} {'samples/s':>10} {'static hit':>10} {'samples/s':>10}")
        for a, b in zip(lru.itertuples(index=False), st.itertuples(index=False), strict=True):
            if round(a.cache_frac * 100) % 10:
                continue
            click.echo(f"  {a.cache_frac:>6.0%} {a.cache_gb:>8.3g} {a.hit_rate:>8.1%} {_num(a.samples_per_s):>10} "
                       f"{b.hit_rate:>10.1%} {_num(b.samples_per_s):>10}")
    for n in w.notes:
        click.echo(f"note: {n}")
