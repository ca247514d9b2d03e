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
