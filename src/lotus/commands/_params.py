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


PRECISION = 0.03  # a probe ends once its steady rate's 95% interval is within +-3%...
PROBE_CAP_STEPS = 600  # ...or after this many batches...
PROBE_CAP_S = 90.0  # ...or this many seconds of hand-offs, whichever comes first


def probe_options(steps_default: int = PROBE_CAP_STEPS):
    """``--steps`` (cap), ``--precision``, ``--max-seconds``: the one probe protocol of every probing command."""

    def deco(f):
        f = click.option("--max-seconds", "max_seconds", type=click.FloatRange(0, min_open=True),
                         default=PROBE_CAP_S, show_default=True,
                         help="A probe ends after this many seconds of batches (past its minimum window).")(f)
        f = click.option("--precision", type=click.FloatRange(0, 1, max_open=True), default=PRECISION,
                         show_default=True,
                         help="A probe ends once its samples/s is known to +-this (95%); 0: run to --steps.")(f)
        return click.option("--steps", type=click.IntRange(1), default=steps_default, show_default=True,
                            help="Most batches per probe (its cap; with --precision 0 its exact length).")(f)

    return deco


def control_option(f):
    """``--control/--no-control``: after a search, one of its settings measured again (lotus.analysis.runspread)."""
    return click.option("--control/--no-control", "control", default=True, show_default=True,
                        help="After the search, measure its narrowest-interval setting again in a process of its "
                             "own: how far separate runs' pace differs, added to the intervals (one probe on top of "
                             "--max-probes).")(f)


def rate_text(rate: float | None, ci95=None, unit: str = "samples/s") -> str:
    """'1,234.5 samples/s (95% CI 1,201.0-1,268.0)'; 'n/a' without a rate."""
    if rate is None:
        return "n/a"
    text = f"{rate:,.1f} {unit}"
    if ci95:
        text += f" (95% CI {ci95[0]:,.1f}-{ci95[1]:,.1f})"
    else:
        text += " (no interval: too few batches)"
    return text


def fail(message: str, code: int = 2):
    """Bad input: one line on stderr naming the problem, then exit ``code`` (2: a usage error)."""
    click.echo(f"lotus: error: {message}", err=True)
    raise click.exceptions.Exit(code)


def failed_probe_lines(name: str, exit_code, stderr_tail: str, n: int = 10) -> list[str]:
    """'NAME failed (exit code N); its stderr ends with:' and the last ``n`` lines of it, indented."""
    lines = (stderr_tail or "").strip().splitlines()[-n:] or ["(nothing)"]
    return [f"  {name} failed (exit code {exit_code}); its stderr ends with:", *(f"    | {t}" for t in lines)]


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
        fail(f"--detail-budget must be a number of percent > 0, got {value!r}")
    return pct


def sink_options(f):
    """``--tensorboard DIR``, ``--prometheus [HOST:]PORT``, ``--wandb``, ``--sink-period S`` (lotus.live.sinks); each
    also read from its environment variable (LOTUS_TENSORBOARD, LOTUS_PROMETHEUS, LOTUS_WANDB, LOTUS_SINK_PERIOD)."""

    def address(ctx, param, value):
        if value is None:
            return None
        from lotus.live.sinks.options import parse_address

        try:
            parse_address(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    f = click.option("--sink-period", "sink_period", type=click.FloatRange(0, min_open=True), default=10.0,
                     show_default=True, envvar="LOTUS_SINK_PERIOD", metavar="SECONDS",
                     help="Seconds between two publishes of the live metrics (and one more at the end).")(f)
    f = click.option("--wandb", "wandb", is_flag=True, envvar="LOTUS_WANDB",
                     help="Live metrics to Weights & Biases: the job's own run, else a new one (honours "
                          "WANDB_MODE=offline). Needs lotus-trace[wandb].")(f)
    f = click.option("--prometheus", "prometheus", callback=address, default=None, metavar="[HOST:]PORT",
                     envvar="LOTUS_PROMETHEUS",
                     help="Live metrics on a Prometheus endpoint (all ranks, label rank). Needs "
                          "lotus-trace[prometheus].")(f)
    return click.option("--tensorboard", "tensorboard", type=click.Path(file_okay=False), default=None,
                        metavar="DIR", envvar="LOTUS_TENSORBOARD",
                        help="Live metrics as TensorBoard scalars in DIR/lotus/. Needs lotus-trace[tensorboard].")(f)
