"""Bad apps CSVs: one line naming the row and the column, exit 2, nothing started (issue 10, item 3)."""

from __future__ import annotations

import pytest

from lotus.submit.apps import AppsError, parse_devices, read_apps
from tests.submit.conftest import HEADER, lotus, tiny, write_csv

GOOD = "resnet,18,32,4,runs,29500,0,0"


@pytest.mark.parametrize(("header", "row", "expect"), [
    (HEADER, "resnet,18,abc,4,runs,29500,0,0", ["row 1 (line 2)", "column 'batch'", "'abc' is not a whole number"]),
    (HEADER, "resnet,18,32,4,runs,29500,0,0;1", ["row 1 (line 2)", "column 'cuda_device'", "not a device list"]),
    (HEADER, "resnet,18,32,4,runs,29500,0,0 0", ["column 'cuda_device'", "names a device twice"]),
    (HEADER, "resnet,18,32,many,runs,29500,0,0", ["column 'workers'", "nor 'auto'"]),
    (HEADER, "resnet,18,32,4,runs,99999,0,0", ["column 'port'", "out of range"]),
    (HEADER, "resnet,18,32,4,runs,29500,-1,0", ["column 'submit_interval'", ">= 0"]),
    (HEADER, "resnet,18,,4,runs,29500,0,0", ["column 'batch'", "empty"]),
    (HEADER, "resnet,18,32,4,runs,29500,0,0,extra", ["row 1 (line 2)", "9 values for 8 columns"]),
    ("arch,depth,batch,workers,output_folder,port,cuda_device", GOOD[:-2],
     ["line 1 (header)", "missing column 'submit_interval'"]),
    (HEADER + ",colour", GOOD + ",red", ["line 1 (header)", "unknown column 'colour'"]),
    (HEADER + ",command", GOOD + ",no-such-program-xyz --flag", ["column 'command'", "command not found"]),
    (HEADER + ",steps", GOOD + ",0", ["column 'steps'", "below 1"]),
    (HEADER + ",cpus", GOOD + ",3-1", ["column 'cpus'", "range end below its start"]),
])
def test_bad_csv_is_one_line_naming_row_and_column_exit_2(tmp_path, header, row, expect):
    csv = write_csv(tmp_path / "apps.csv", header, GOOD, row) if "line 1" not in expect[0] else \
        write_csv(tmp_path / "apps.csv", header, row)
    out = tmp_path / "out"
    r = lotus("submit", csv, "--out", out, "--data", tmp_path)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    text = lines[0].replace("row 2 (line 3)", "row 1 (line 2)") if "line 1" not in expect[0] else lines[0]
    for e in expect:
        assert e in text, text
    assert not out.exists()  # nothing started, nothing written


def test_second_row_error_names_row_2(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", HEADER, GOOD, "resnet,18,x1,4,runs,29500,0,0")
    with pytest.raises(AppsError, match=r"row 2 \(line 3\), column 'batch'"):
        read_apps(csv)


def test_unknown_model_and_missing_dataset_are_bad_input(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", HEADER, "resnet,19,32,4,runs,29500,0,0")
    r = lotus("submit", csv, "--data", tmp_path, "--dry-run")
    assert r.exit_code == 2 and "columns 'arch'+'depth': 'resnet19' is not a torchvision model" in r.stderr
    csv = write_csv(tmp_path / "apps.csv", HEADER, GOOD)
    r = lotus("submit", csv, "--dry-run")
    assert r.exit_code == 2 and "--data" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_command_rows_need_no_torchloader_columns(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", "name,command,workers", f"a,\"{tiny()}\",2", f"b,\"{tiny('--n', 8)}\",auto")
    apps = read_apps(csv)
    assert [a.name for a in apps] == ["a", "b"]
    assert apps[0].workers == 2 and not apps[0].workers_auto and apps[1].workers_auto
    assert apps[0].command[-1].endswith("tiny_job.py") and apps[1].command[-2:] == ("--n", "8")
    assert apps[0].output_folder == "" and apps[0].cuda_devices is None and apps[0].port is None


def test_torchloader_csv_parses_as_torchloader_wrote_it(tmp_path):
    # torchloader's own file: quoted, space-separated device lists
    csv = write_csv(tmp_path / "apps.csv", HEADER, 'resnet,18,128,1,single_1w,5336,0,"0"',
                    'resnet,50,128,auto,single_1w,5337,2.5,"0 1"', "resnet,18,64,,other,,,")
    a, b, c = read_apps(csv)
    assert (a.model, a.batch, a.workers, a.cuda_devices, a.port) == ("resnet18", 128, 1, (0,), 5336)
    assert b.workers_auto and b.cuda_devices == (0, 1) and b.ranks == 2 and b.submit_interval_s == 2.5
    assert c.workers is None and c.port is None and c.submit_interval_s == 0 and c.cuda_devices is None
    assert a.name == "resnet18-b128-w1" and b.name == "resnet50-b128-wauto" and c.name == "resnet18-b64"


def test_duplicate_names_are_rejected_and_defaults_made_unique(tmp_path):
    csv = write_csv(tmp_path / "apps.csv", HEADER + ",name", GOOD + ",x", GOOD + ",x")
    with pytest.raises(AppsError, match=r"row 2 .*column 'name'.*row 1's name too"):
        read_apps(csv)
    csv = write_csv(tmp_path / "apps.csv", HEADER, GOOD, GOOD)
    assert [a.name for a in read_apps(csv)] == ["resnet18-b32-w4", "resnet18-b32-w4-2"]


def test_device_lists():
    assert parse_devices("0") == (0,)
    assert parse_devices("0,1") == parse_devices("0 1") == parse_devices(" 0, 1 ") == (0, 1)
    assert parse_devices("") is None and parse_devices("none") == ()
    for bad in ("a", "0;1", "-1", "0,,1x"):
        with pytest.raises(ValueError):
            parse_devices(bad)


def test_empty_and_header_only_csv(tmp_path):
    for text, msg in (("", "empty"), (HEADER + "\n", "no app")):
        (tmp_path / "a.csv").write_text(text)
        r = lotus("submit", tmp_path / "a.csv")
        assert r.exit_code == 2 and msg in r.stderr
