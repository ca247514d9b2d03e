"""The commands that launch probes, from recorded outputs: ``lotus tune``, ``stalls``, ``sensitivity`` and
``submit`` on tiny jobs (tests/tune/jobs, tests/profile/jobs, tests/submit on this 2-CPU VM; each
``KIND.txt`` is what the command printed, ``KIND.json`` what it wrote in its output directory in the same
run), their ``lotus report`` pages, and ``lotus power`` on a bench table: the invariants hold, the text's
figures are the JSON's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.invariants import rules as R
from tests.invariants.commands import TEMPLATE, check_run, lotus
from tests.invariants.shapes import Shape, write_shape

PROBES = Path(__file__).resolve().parent / "data" / "probes"


def _recorded(kind: str) -> tuple[dict, str, list]:
    doc, found = R.parse_json((PROBES / f"{kind}.json").read_text(), f"{kind}.json")
    text = (PROBES / f"{kind}.txt").read_text()
    found += R.check_json(doc, f"{kind}.json") + R.check_text(text, f"lotus {kind}")
    found += R.check_backed(text, doc, f"lotus {kind}", TEMPLATE)
    return doc, text, found


@pytest.mark.parametrize("kind", ["tune", "stalls", "sensitivity", "submit"])
def test_recorded_outputs_keep_the_invariants(kind):
    _, _, found = _recorded(kind)
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("kind", ["tune", "stalls", "sensitivity"])
def test_the_report_of_a_probe_directory(kind, tmp_path):
    """``lotus report`` of the command's output directory: the answer (from its JSON) above the probes (small
    generated runs stand for the probes' traces)."""
    doc, _, _ = _recorded(kind)
    d = tmp_path / kind
    d.mkdir()
    shutil.copy(PROBES / f"{kind}.json", d)
    probes = doc["probes"].values() if isinstance(doc["probes"], dict) else doc["probes"]
    for i, p in enumerate(probes):
        write_shape(d / p["name"], Shape(epochs=(6 + i,), prep_us=(3_000 + 500 * i,)))
    found, docs = check_run(d, tmp_path / "out")
    assert docs["report"][kind] == doc  # the answer section's figures are the command's
    assert not found, "\n".join(map(str, found))


@pytest.fixture
def bench_table(tmp_path):
    from tests.power.conftest import make_table

    path = tmp_path / "toy.csv"
    make_table().to_csv(path, index=False)
    return path


@pytest.mark.parametrize("args", [["predict", "--batch", "1,32,128", "--tenants", "1,2"], ["fit"],
                                  ["plan", "--power-cap", "250", "--clocks", "table"]], ids=lambda a: a[0])
def test_power_on_a_bench_table(args, bench_table):
    text = lotus("power", *args, "--table", bench_table)
    js = lotus("power", *args, "--table", bench_table, "--json")
    assert text.exit_code == js.exit_code == 0, text.stderr + js.stderr
    doc, found = R.parse_json(js.stdout, js.where)
    found += R.check_json(doc, js.where) + R.check_text(text.stdout, text.where)
    found += R.check_backed(text.stdout, doc, text.where, TEMPLATE)
    assert not found, "\n".join(map(str, found))

