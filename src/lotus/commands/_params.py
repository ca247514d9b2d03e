"""Click option callbacks shared by the commands that launch jobs (run, tune, stalls, submit)."""

from __future__ import annotations

import click


def cpus_option(ctx, param, value):
    """``--cpus LIST`` (``0-3,8``) -> sorted CPU ids; a usage error naming the problem otherwise."""
    if value is None:
        return None
    from lotus.launch.options import parse_cpus

    try:
        return parse_cpus(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def budget_option(ctx, param, value):
    """``--detail-budget PCT``: a number > 0 (percent); otherwise one line on stderr and exit 2."""
    if value is None:
        return None
    import math

    try:
        pct = float(value)
    except ValueError:
        pct = float("nan")
    if not math.isfinite(pct) or pct <= 0:
        click.echo(f"lotus: error: --detail-budget must be a number of percent > 0, got {value!r}", err=True)
        raise click.exceptions.Exit(2)
    return pct
