"""Mappings: import of the study's exports reproduces its mapping JSON; schema, support and weights."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lotus.errors import InputError
from lotus.map import build_mapping, import_mapping, load_mapping, save_mapping
from lotus.map.mapping import PYTHON_KEY, split_key

FLIP = "ImagingFlipLeftRight|_imaging.cpython-310-x86_64-linux-gnu.so"


def _sets(m: dict) -> dict:
    return {op: set(funcs) for op, funcs in m["op_to_func"].items()}


def test_uprof_import_reproduces_the_study_mapping(amd_dir, reference_dir):
    ours = import_mapping(amd_dir, "uprof")
    study = load_mapping(reference_dir / "mapping_funcs.amd.json")
    assert _sets(ours) == _sets(study)
    assert {k: set(v) for k, v in ours["common_funcs_to_op"].items()} == {
        k: set(v) for k, v in study["common_funcs_to_op"].items()
    }
    # Weights: shares of each op's CPU_TIME samples over both runs, largest first.
    loader = ours["weights"]["Loader"]
    assert next(iter(loader)) == "jpeg_idct_16x16|libjpeg.so.9.5.0"
    assert loader["jpeg_idct_16x16|libjpeg.so.9.5.0"] == pytest.approx((2454 + 2383) / (5179 + 5075), abs=0.01)
    for op, w in ours["weights"].items():
        assert sum(w.values()) == pytest.approx(1.0, abs=1e-4), op
        assert ours["op_to_func"][op] == sorted(ours["op_to_func"][op], key=lambda k: (-w[k], k))
    assert ours["lotus"]["runs"] == dict.fromkeys(ours["op_to_func"], 2)


def test_vtune_import_matches_the_study_within_its_runs(intel_dir, reference_dir, golden_dir):
    ours = import_mapping(intel_dir, "vtune")
    study = load_mapping(reference_dir / "mapping_funcs.intel.json")
    # The study's Intel mapping came from more runs than the five kept per op: ours is a subset.
    for op, funcs in _sets(ours).items():
        assert funcs <= set(study["op_to_func"][op]), op
    assert ours["op_to_func"]["RandomHorizontalFlip"][0] == FLIP
    resample = "ImagingResampleHorizontal_8bpc|_imaging.cpython-310-x86_64-linux-gnu.so"
    assert ours["weights"]["RandomResizedCrop"][resample] == pytest.approx(2.831890 / 3.637722, abs=1e-5)
    golden = json.loads((golden_dir / "mapping_intel_import.json").read_text())
    ours["lotus"]["source"] = golden["lotus"]["source"]
    assert ours == golden


def test_min_support_keeps_functions_seen_in_enough_runs(intel_dir):
    union = import_mapping(intel_dir, "vtune")
    every = import_mapping(intel_dir, "vtune", min_support=1.0)
    half = import_mapping(intel_dir, "vtune", min_support=0.5)
    for op in union["op_to_func"]:
        assert set(every["op_to_func"][op]) <= set(half["op_to_func"][op]) <= set(union["op_to_func"][op])
        for key in every["op_to_func"][op]:
            assert union["support"][op][key] == 1.0
    # __libc_calloc is in 1 of 5 RandomHorizontalFlip runs, ImagingFlipLeftRight in all.
    assert "__libc_calloc|libc.so.6" in union["op_to_func"]["RandomHorizontalFlip"]
    assert every["op_to_func"]["RandomHorizontalFlip"] == [FLIP]
    assert union["support"]["RandomHorizontalFlip"]["__libc_calloc|libc.so.6"] == pytest.approx(0.2)


def test_build_mapping_weights_support_and_python_key():
    profile = pd.DataFrame(
        [("A", "1", "f", "libx.so", 3.0), ("A", "1", "[Python interpreter]", "python", 1.0),
         ("A", "2", "f", "libx.so", 2.0), ("A", "2", "g", None, 2.0), ("B", "1", "g", None, 1.0)],
        columns=["op", "run", "function", "module", "value"],
    )
    m = build_mapping(profile, op_order=["B", "A"], runs={"A": 2, "B": 4})
    assert list(m["op_to_func"]) == ["B", "A"]
    assert m["op_to_func"]["A"] == ["f|libx.so", "g|[Unknown]"]  # the Python share is a weight, not a function
    assert m["weights"]["A"] == {"f|libx.so": 0.625, "g|[Unknown]": 0.25, PYTHON_KEY: 0.125}
    assert m["support"]["A"]["g|[Unknown]"] == 0.5
    assert m["support"]["B"]["g|[Unknown]"] == 0.25
    assert m["common_funcs_to_op"] == {"g|[Unknown]": ["B", "A"]}
    assert build_mapping(profile, min_support=0.75, runs={"A": 2, "B": 4})["op_to_func"]["B"] == []
    with pytest.raises(ValueError, match="min_support"):
        build_mapping(profile, min_support=2)


def test_split_key_keeps_pipes_in_names():
    assert split_key("decode_mcu|libjpeg.so.9") == ("decode_mcu", "libjpeg.so.9")
    assert split_key("operator|(a, b)|libfoo.so") == ("operator|(a, b)", "libfoo.so")
    assert split_key("bare") == ("bare", "[Unknown]")


def test_load_and_save(tmp_path, reference_dir):
    study = load_mapping(reference_dir / "mapping_funcs.intel.json")
    assert "weights" not in study
    p = save_mapping(study, tmp_path / "sub" / "m.json")
    assert load_mapping(p) == study
    no_common = tmp_path / "nc.json"
    no_common.write_text(json.dumps({"op_to_func": {"A": ["f|x"], "B": ["f|x", "g|y"]}}))
    assert load_mapping(no_common)["common_funcs_to_op"] == {"f|x": ["A", "B"]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", 'expected a JSON object with "op_to_func"'),
        ('{"op_to_func": {"A": "f|x"}}', 'must be a list of "func|module" strings'),
        ('{"op_to_func": {"A": ["f|x"]}, "weights": {"A": {"f|x": -1}}}', "non-negative number"),
    ],
)
def test_bad_mapping_files(tmp_path, text, message):
    p = tmp_path / "m.json"
    p.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        load_mapping(p)
    assert err.value.path == str(p)


def test_import_layout_errors_and_salvage(tmp_path, intel_dir, caplog):
    with pytest.raises(InputError, match="no such directory"):
        import_mapping(tmp_path / "nope", "vtune")
    (tmp_path / "flat.csv").write_text("Function,CPU Time\n")
    with pytest.raises(InputError, match=r"<dir>/<Op>/<run>\.csv"):
        import_mapping(tmp_path, "vtune")
    # One unreadable run: left out with a warning naming it, the others are used.
    root = tmp_path / "runs"
    (root / "Loader").mkdir(parents=True)
    (root / "Loader" / "1.csv").write_bytes((intel_dir / "Loader" / "1.csv").read_bytes())
    (root / "Loader" / "2.csv").write_text("Module,CPU Time\nlibc.so.6,1\n")
    m = import_mapping(root, "vtune")
    assert m["lotus"]["runs"] == {"Loader": 1}
    assert "2.csv" in m["lotus"]["skipped_files"][0]
    assert "2.csv" in caplog.text
    with pytest.raises(InputError, match="no readable uprof run file"):
        import_mapping(root, "uprof")
