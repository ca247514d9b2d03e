"""The `lotus` entry point: fast help, lazy imports, errors as one line."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from lotus.cli import cli


def test_help_lists_commands_without_importing_heavy_modules():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom lotus.cli import cli\n"
            "r = CliRunner().invoke(cli, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "heavy = [m for m in ('torch', 'pandas', 'numpy', 'matplotlib') if m in sys.modules]\n"
            "assert not heavy, heavy\nprint(r.output)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    for name in ("demo", "analyze", "viz", "map", "hw", "report"):
        assert name in out.stdout


def test_import_lotus_is_light():
    code = "import sys, lotus\nassert not any(m in sys.modules for m in ('torch', 'pandas', 'numpy'))\n"
    subprocess.run([sys.executable, "-c", code], timeout=60, check=True)


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "lotus" in result.output


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
