"""py-spy collapsed stacks -> samples per op and leaf native function."""

from __future__ import annotations

import glob
import os

import pytest

from lotus.errors import InputError
from lotus.map.elf import read_elf
from lotus.map.mapping import PYTHON_KEY, build_mapping
from lotus.map.pyspy import Frame, attribute, parse_frame, read_collapsed
from lotus.map.symbols import Mapping, Symbolizer

MARKERS = {"_lotus_op__Loader": "Loader", "_lotus_op__RandomResizedCrop": "RandomResizedCrop"}


@pytest.mark.parametrize(
    ("text", "frame"),
    [
        ("decode_mcu (libjpeg.so.62)", Frame("decode_mcu", "native", module="libjpeg.so.62")),
        ("JpegImageFile._open (PIL/JpegImagePlugin.py:393)",
         Frame("JpegImageFile._open", "python", source="PIL/JpegImagePlugin.py")),
        ("_find_and_load (<frozen importlib._bootstrap>:1176)",
         Frame("_find_and_load", "python", source="<frozen importlib._bootstrap>")),
        ("clip8 (Resample.c:223)", Frame("clip8", "source", source="Resample.c")),
        ("0x7f6d200cc162 (libjpeg-6dc8d115.so.62.4.0)",
         Frame("0x7f6d200cc162", "address", module="libjpeg-6dc8d115.so.62.4.0")),
        ("at::native::{lambda(char**, long const*, long)#1}::operator() const (libtorch_cpu.so)",
         Frame("at::native::{lambda(char**, long const*, long)#1}::operator() const", "native",
               module="libtorch_cpu.so")),
        ("0x7f6d2064524a", Frame("0x7f6d2064524a", "address")),
        ("_lotus_op__My Op#2 (w.py:5)", Frame("_lotus_op__My Op#2", "python", source="w.py")),
    ],
)
def test_parse_frame(text, frame):
    assert parse_frame(text) == frame


def test_read_collapsed(tmp_path):
    f = tmp_path / "raw.txt"
    f.write_text("a (x.py:1);b (libc.so.6) 3\n\nc (x.py:2) 12\n")
    assert read_collapsed(f) == [(["a (x.py:1)", "b (libc.so.6)"], 3), (["c (x.py:2)"], 12)]
    f.write_text("a (x.py:1);b (libc.so.6)\n")
    with pytest.raises(InputError, match="malformed collapsed stack") as err:
        read_collapsed(f)
    assert err.value.line == 1
    with pytest.raises(InputError, match="py-spy wrote no output"):
        read_collapsed(tmp_path / "none.txt")


def _stack(*frames: str) -> list[str]:
    return ["0x7f00 (libc.so.6)", "<module> (_workload.py:250)", *frames]


def test_attribute_counts_only_measured_samples_by_leaf():
    run0 = "_lotus_run0 (_workload.py:58)"
    run1 = "_lotus_run1 (_workload.py:58)"
    loader = "_lotus_op__Loader (_workload.py:47)"
    rrc = "_lotus_op__RandomResizedCrop (_workload.py:47)"
    stacks = [
        (_stack("warm (x.py:1)", "decode_mcu (libjpeg.so.62)"), 50),  # warm-up: outside the markers
        (_stack(run0, loader, "pil_loader (ops.py:60)", "ImagingDecoderDecode (_imaging.so)",
                "decode_mcu (libjpeg.so.62)"), 7),
        (_stack(run1, loader, "pil_loader (ops.py:60)", "decode_mcu (libjpeg.so.62)"), 5),
        (_stack(run0, loader, "pil_loader (ops.py:61)"), 4),  # Python code is the leaf
        (_stack(run0, loader), 1),  # the loop itself
        (_stack(run0, rrc, "resize (Image.py:2440)", "ImagingResample (_imaging.so)", "memcpy (libc.so.6)"), 3),
        (_stack(run0, "measure_ops (_workload.py:220)"), 2),  # between ops
        (_stack(loader, "decode_mcu (libjpeg.so.62)"), 9),  # an op marker without a run marker: not measured
        (_stack(run0, "_lotus_op__Unknown (_workload.py:47)", "f (libc.so.6)"), 1),
    ]
    att = attribute(stacks, MARKERS)
    assert att.samples_per_op == {"Loader": 17, "RandomResizedCrop": 3}
    assert att.outside_samples == 50 + 2 + 9 + 1
    rows = {(r.op, r.run, r.function, r.module): r.value for r in att.profile.itertuples()}
    assert rows == {
        ("Loader", "0", "decode_mcu", "libjpeg.so.62"): 7.0,
        ("Loader", "1", "decode_mcu", "libjpeg.so.62"): 5.0,
        ("Loader", "0", "[Python interpreter]", "python"): 5.0,
        ("RandomResizedCrop", "0", "memcpy", "libc.so.6"): 3.0,
    }
    m = build_mapping(att.profile, runs={"Loader": 2, "RandomResizedCrop": 1})
    assert m["op_to_func"] == {"Loader": ["decode_mcu|libjpeg.so.62"], "RandomResizedCrop": ["memcpy|libc.so.6"]}
    assert m["weights"]["Loader"] == {"decode_mcu|libjpeg.so.62": pytest.approx(12 / 17, abs=1e-6),
                                          PYTHON_KEY: pytest.approx(5 / 17, abs=1e-6)}
    assert m["support"]["Loader"]["decode_mcu|libjpeg.so.62"] == 1.0


def _imaging_maps() -> tuple[str, list[Mapping], int]:
    import PIL

    path = glob.glob(os.path.join(os.path.dirname(PIL.__file__), "_imaging.cpython*.so"))[0]
    base = 0x7F0000000000
    return path, [Mapping(base, base + os.path.getsize(path), 0, path)], base


def test_inlined_source_frames_climb_to_their_function_and_addresses_are_named():
    path, maps, base = _imaging_maps()
    module = os.path.basename(path)
    elf = read_elf(path)
    sym = Symbolizer(maps)
    run0, rrc = "_lotus_run0 (w.py:1)", "_lotus_op__RandomResizedCrop (w.py:2)"
    flip = elf.starts[elf.names.index("ImagingFlipLeftRight")]
    stacks = [
        # py-spy prints functions of libraries with debug info as "name (file.c:line)", inlined ones too.
        (_stack(run0, rrc, "resize (Image.py:2440)", "ImagingResample (Resample.c:836)",
                "_ImagingResampleVertical_8bpc (Resample.c:512)", "clip8 (Resample.c:223)"), 6),
        (_stack(run0, rrc, "resize (Image.py:2440)", "not_a_symbol_anywhere (Resample.c:1)"), 2),
        (_stack(run0, rrc, f"{base + elf.offset_of(flip + 9):#x} ({module})"), 3),
    ]
    att = attribute(stacks, MARKERS, sym)
    rows = {(r.function, r.module): r.value for r in att.profile.itertuples()}
    assert rows == {
        ("_ImagingResampleVertical_8bpc", module): 6.0,
        ("not_a_symbol_anywhere", "[Unknown]"): 2.0,
        ("ImagingFlipLeftRight", module): 3.0,
    }
    assert att.modules == {module: path}
