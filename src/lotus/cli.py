"""The ``lotus`` command line: a click group whose subcommands are imported lazily.

Subcommands live in :mod:`lotus.commands`; each one only parses options, calls a pure function of
the library and writes files. This module is the one place that turns a :class:`LotusError` into a
one-line message and an exit code (1 for bad input, 2 for usage errors and an unreachable cluster, 3 for
a failed gate).
"""

from __future__ import annotations

import logging
import os
import sys

import click

from lotus import __version__

# name -> (module:attribute, one-line help shown by `lotus --help` without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("lotus.commands.demo:demo", "Generate a JPEG dataset, train a small model traced by lotus, summarise."),
    "run": ("lotus.commands.run:run", "Run any training command traced by lotus, without editing it."),
    "stalls": ("lotus.commands.stalls:stalls", "Split a step into compute, prep stall and fetch stall (probes)."),
    "sensitivity": ("lotus.commands.sensitivity:sensitivity",
                    "Throughput over CPUs x page cache, and the job's CPU/memory demand (probes + model)."),
    "submit": ("lotus.commands.submit:submit", "Run many apps from a CSV, side by side or in turn, local or Slurm."),
    "info": ("lotus.commands.info:info", "List the trace files of a run directory and what they hold."),
    "analyze": ("lotus.commands.analyze:analyze", "Statistics, wait/delay, verdicts and GPU idle of traced runs."),
    "viz": ("lotus.commands.viz:viz", "Write a Chrome/Perfetto trace (JSON) of a traced run."),
    "plot": ("lotus.commands.plot:plot", "Figures of preprocessing, ops, waits and workers (PNG and SVG)."),
    "report": ("lotus.commands.report:report", "One self-contained HTML report (plus report.json)."),
    "diff": ("lotus.commands.diff:diff", "What got slower or faster between two runs."),
    "export": ("lotus.commands.export:export", "Export events and batches to Parquet."),
    "compact": ("lotus.commands.compact:compact", "Stitch rotated parts and compress a finished run, once."),
    "map": ("lotus.commands.map:map_group", "LotusMap: map Python ops to the native functions they run."),
    "hw": ("lotus.commands.hw:hw", "Attribute hardware metrics (VTune/uProf) to Python ops."),
    "top": ("lotus.commands.top:top", "Live view of a running job from the trace files it is writing."),
    "whatif": ("lotus.commands.whatif:whatif", "Predict samples/s for other workers, CPUs and cache sizes."),
    "tune": ("lotus.commands.tune:tune", "Find the DataLoader settings that maximise samples/s."),
    "power": ("lotus.commands.power:power", "GPU power and energy: bench, predict, plan under a power cap."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand runs."""

    def __init__(self, *args, lazy: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            target, _ = self.lazy[cmd_name]
            module_name, attr = target.split(":")
            import importlib

            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:  # a subcommand not built yet, or a missing optional dep
                if exc.name and exc.name.startswith("lotus"):
                    return None
                raise
            return getattr(module, attr)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text from the table above, so `lotus --help` imports nothing heavy.
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        from lotus.errors import LotusError

        try:
            return super().invoke(ctx)
        except LotusError as exc:
            click.echo(f"lotus: error: {exc}", err=True)
            ctx.exit(getattr(exc, "exit_code", 1))
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("lotus: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `lotus ... | head`: the reader left; stop quietly
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            ctx.exit(141)
        except Exception as exc:
            if os.environ.get("LOTUS_DEBUG"):
                raise
            click.echo(
                f"lotus: internal error: {type(exc).__name__}: {exc} (set LOTUS_DEBUG=1 for a traceback)",
                err=True,
            )
            ctx.exit(1)


class _OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"lotus: {record.levelname.lower()}: {record.getMessage()}"


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter())
    root = logging.getLogger("lotus")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = True  # test harnesses (caplog) and embedding apps still see the records


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lotus")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def cli(verbose: int, quiet: bool) -> None:
    """lotus: where the time of your PyTorch input pipeline goes, and why the GPU sits idle.

    Trace any training command without editing it: `lotus run -- python train.py`; watch it with
    `lotus top`; then `lotus analyze verdict --data-dir lotus-runs/<run>`. What would make it faster:
    `lotus whatif`, `lotus tune`, `lotus stalls`, `lotus sensitivity`.
    """
    _setup_logging(verbose, quiet)


def main(argv: list[str] | None = None) -> None:
    """The ``lotus`` program (``argv`` None: the process's arguments; it then ends the process as soon as the
    command is done, :func:`lotus._exit.leave`), or its command ``argv`` (which raises ``SystemExit`` as click does)."""
    if argv is not None:
        cli.main(args=argv, prog_name="lotus")
        return
    try:
        cli.main(prog_name="lotus")
    except SystemExit as exc:
        from lotus._exit import leave

        leave(exc.code)
