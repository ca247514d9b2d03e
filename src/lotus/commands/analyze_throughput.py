"""``lotus analyze throughput``: the steady-state samples/s of traced runs, with their 95% intervals."""

from __future__ import annotations

from pathlib import Path

import click

from lotus.commands._params import rate_text
from lotus.commands.analyze import configs_of, data_dir_option, echo_json


@click.command(short_help="Steady-state samples/s with its 95% interval, and what was left out.")
@data_dir_option
@click.option("--repeats", is_flag=True,
              help="The runs repeat one configuration (each its own process): also their mean, its interval from "
                   "their spread, and how many runs' intervals hold the mean of the others.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def throughput_cmd(data_dir: Path, repeats: bool, as_json: bool) -> None:
    """The steady-state samples/s of each run: after the prefetched ramp (num_workers x prefetch_factor
    batches) and any start-up batches, epoch starts counted, ranks added; with its 95% interval.

    Exits 1 when a run has no steady state to measure (one batch, or none after the ramp), or when --repeats
    finds fewer than two runs with a rate."""
    from lotus.analysis.throughput import throughput

    doc, missing = {"configs": {}}, []
    for cfg in configs_of(data_dir):
        t = throughput(cfg.summary_batches, cfg.loaders)  # a scanned run: its table's columns, not the frame
        doc["configs"][cfg.name] = t
        if t["samples_per_s"] is None:
            missing.append(cfg.name)
        if not as_json:
            _print(cfg.name, t)
    few = False
    if repeats:
        from lotus.analysis.runspread import repeats_of

        doc["repeats"] = repeats_of(doc["configs"])
        few = doc["repeats"] is None
        if not as_json and not few:
            for line in repeats_lines(doc["repeats"]):
                click.echo(line)
    if as_json:
        echo_json(doc)
    if few:
        rated = sum(t["samples_per_s"] is not None for t in doc["configs"].values())
        click.echo(f"lotus: --repeats needs two runs with a rate or more in {data_dir} (found {rated})", err=True)
        raise click.exceptions.Exit(1)
    if missing:
        for name in missing:
            note = doc["configs"][name].get("note") or "no steady state"
            click.echo(f"lotus: {name}: no steady-state rate: {note}", err=True)
        raise click.exceptions.Exit(1)


def _print(name: str, t: dict) -> None:
    if t["samples_per_s"] is None:
        click.echo(f"{name}: no steady-state rate ({t.get('note') or 'no batches'})")
        return
    rel = f", +-{t['rel_halfwidth']:.1%}" if t.get("rel_halfwidth") is not None else ""
    ranks = f" over {t['ranks']} ranks" if t.get("ranks", 1) > 1 else ""
    click.echo(f"{name}: {rate_text(t['samples_per_s'], t['ci95'])}{rel}{ranks}")
    click.echo(f"  steady state: {t['steady_batches']} of {t['batches']} batches, {t['window_s']:.3g} s "
               f"(loader {t['loader']})")
    left = t["left_out"]
    click.echo(f"  left out: the ramp, {left['ramp_batches']} batch(es) ({left['ramp']})"
               + (f"; start-up, {left['startup_batches']} batch(es)" if left["startup_batches"] else ""))
    if t.get("note"):
        click.echo(f"  note: {t['note']}")
    others = [r for r in t["loaders"] if r["loader"] != t["loader"]]
    for r in others:
        ci = (r["ci95_lo"], r["ci95_hi"]) if r["ci95_lo"] is not None else None
        click.echo(f"  other loader {r['loader']} (rank {r['rank']}): {rate_text(r['samples_per_s'], ci)}, "
                   f"{r['batches']} batches")
    click.echo("")


def repeats_lines(r: dict) -> list[str]:
    """What :func:`lotus.analysis.runspread.repeats` found, as lines (``lotus run --repeat`` prints them too)."""
    lo, hi = r["mean_ci95"]
    lines = [f"repeats ({r['runs']} runs of one configuration): mean {r['mean_samples_per_s']:,.1f} samples/s "
             f"(95% CI {lo:,.1f}-{hi:,.1f}, from the runs' spread)",
             f"  the runs spread {r['rel_sd']:.1%} (sd); beyond each run's own interval {r['beyond_rel_sd']:.1%}: "
             + (f"LOTUS_RUN_SPREAD={r['beyond_rel_sd']:.2g} gives a single run of this job an interval that holds it "
                f"(lotus adds {r['default_rel_sd']:.1%})" if r["beyond_rel_sd"] > r["default_rel_sd"] else
                f"within the {r['default_rel_sd']:.1%} lotus adds to every rate: single runs' intervals need no more")]
    if r["with_interval"]:
        width = f"{r['width_ratio']:.2f}x" if r["width_ratio"] is not None else "n/a (the runs are equal)"
        lines.append(f"  each run's interval holds the mean of the others in {r['held']} of {r['with_interval']} "
                     f"runs ({r['coverage']:.0%}); the intervals' mean half-width +-{r['rel_mean_halfwidth']:.1%} is "
                     f"{width} the runs' own 95% spread (+-{r['rel_empirical_halfwidth']:.1%}) (calibrated: >= 90% "
                     "and <= 2x, docs/intervals.md)")
    return lines
