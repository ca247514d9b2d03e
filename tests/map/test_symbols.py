"""Naming native addresses: ELF symbols, unwind tables, separate debug files, donor builds."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lotus.map.donors import Donors, library_stem
from lotus.map.elf import read_elf
from lotus.map.symbols import Mapping, Symbolizer, parse_maps


def _site_packages() -> Path:
    import PIL

    return Path(PIL.__file__).resolve().parent.parent


def _imaging() -> str:
    import PIL

    return glob.glob(os.path.join(os.path.dirname(PIL.__file__), "_imaging.cpython*.so"))[0]


def _tv_libjpeg() -> str:
    found = glob.glob(str(_site_packages() / "torchvision.libs" / "libjpeg*.so*"))
    if not found or not read_elf(found[0]).has_symtab:
        pytest.skip("no torchvision-bundled libjpeg with symbols in this environment")
    return found[0]


@pytest.fixture(scope="module")
def stripped_jpeg(tmp_path_factory) -> tuple[str, str]:
    """(a stripped copy of torchvision's libjpeg-turbo, the original with symbols)."""
    original = _tv_libjpeg()
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("binutils `strip` not installed")
    copy = tmp_path_factory.mktemp("strip") / "libjpeg-copy.so.8"
    shutil.copyfile(original, copy)
    subprocess.run([strip, "--strip-all", str(copy)], check=True)
    return str(copy), original


def test_parse_maps():
    text = (
        "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/python3.11\n"
        "7f0000000000-7f0000010000 r-xp 00006000 08:01 456 /lib/libjpeg.so.62 (deleted)\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
        "7f1000000000-7f1000001000 rw-p 00000000 00:00 0\n"
        "garbage line\n"
    )
    maps = parse_maps(text)
    assert maps == [Mapping(0x55D0C0000000, 0x55D0C0001000, 0, "/usr/bin/python3.11"),
                    Mapping(0x7F0000000000, 0x7F0000010000, 0x6000, "/lib/libjpeg.so.62")]


def test_symbols_of_a_library_with_symtab():
    elf = read_elf(_imaging())
    assert elf.has_symtab and len(elf.names) > 100 and elf.fde_starts
    i = elf.names.index("ImagingFlipLeftRight")
    start = elf.starts[i]
    name, s, e = elf.lookup(start + 5)
    assert (name, s) == ("ImagingFlipLeftRight", start) and e > start + 5


def test_plt_stubs_are_named_as_such():
    elf = read_elf(_imaging())
    if not elf.plt:
        pytest.skip("no .plt section in this build")
    lo, hi = elf.plt[0]
    assert elf.lookup(lo + (hi - lo) // 2) == ("[PLT stub]", lo, hi)


def test_not_elf_gives_no_symbols(tmp_path):
    f = tmp_path / "x.so"
    f.write_bytes(b"not an elf file at all" * 10)
    elf = read_elf(str(f))
    assert elf.starts == [] and elf.lookup(0x1000) is None
    (tmp_path / "empty.so").write_bytes(b"")
    assert read_elf(str(tmp_path / "empty.so")).starts == []


def test_symbolizer_resolves_absolute_addresses():
    path = _imaging()
    elf = read_elf(path)
    base = 0x7F0000000000
    sym = Symbolizer([Mapping(base, base + os.path.getsize(path), 0, path)])
    vaddr = elf.starts[elf.names.index("ImagingFlipLeftRight")] + 7
    assert sym.resolve(base + elf.offset_of(vaddr)) == ("ImagingFlipLeftRight", os.path.basename(path))
    assert sym.resolve(0x10) is None  # outside any file


def test_stripped_functions_are_bounded_by_unwind_info_and_prologues(stripped_jpeg):
    copy, original = stripped_jpeg
    ref = read_elf(original)
    elf = read_elf(copy)
    assert not elf.has_symtab
    for name in ("decode_mcu", "jsimd_idct_islow_avx2"):  # C with CFI; NASM assembly without
        i = ref.names.index(name)
        start, end = ref.starts[i], ref.sized_ends[i]
        found = elf.lookup(start + (end - start) // 2)
        assert found is not None and found[0] is None, name
        assert found[1] == start, name
        base = 0x7F0000000000
        sym = Symbolizer([Mapping(base, base + os.path.getsize(copy), 0, copy)])
        assert sym.resolve(base + elf.offset_of(start + 3)) == (f"func@{start:#x}", os.path.basename(copy))


def test_donor_names_for_stripped_functions(stripped_jpeg):
    copy, original = stripped_jpeg
    ref = read_elf(original)
    elf = read_elf(copy)
    donors = Donors([original], search=False)
    for name in ("decode_mcu", "jsimd_idct_islow_avx2", "decompress_onepass"):
        i = ref.names.index(name)
        _, start, end = elf.lookup(ref.starts[i] + 4)
        got = donors.name(copy, elf, start, end)
        assert got is not None and got[0] == name, (name, got)
        assert got[1]["score"] >= 0.99 and got[1]["from"] == str(Path(original).resolve())
    # Through the symbolizer, with discovery of same-stem libraries among the mapped files.
    base, base2 = 0x7F0000000000, 0x7E0000000000
    maps = [Mapping(base2, base2 + 4096, 0, original), Mapping(base, base + os.path.getsize(copy), 0, copy)]
    sym = Symbolizer(sorted(maps, key=lambda m: m.start), donors=Donors())
    i = ref.names.index("decode_mcu")
    assert sym.resolve(base + elf.offset_of(ref.starts[i] + 10)) == ("decode_mcu", os.path.basename(copy))
    assert sym.matched[f"decode_mcu|{os.path.basename(copy)}"]["score"] >= 0.99


def test_debug_file_by_build_id(tmp_path, monkeypatch):
    import mmap

    from lotus.map.elf import _build_id, _sections

    original = _imaging()
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("binutils `strip` not installed")
    copy = tmp_path / "lib" / os.path.basename(original)
    copy.parent.mkdir()
    shutil.copyfile(original, copy)
    subprocess.run([strip, "--strip-all", str(copy)], check=True)
    with open(copy, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        build_id = _build_id(mm, _sections(mm)[2])
    if not build_id:
        pytest.skip("this Pillow build has no GNU build-id note")
    monkeypatch.setenv("LOTUS_DEBUG_DIRS", str(tmp_path / "nowhere"))
    assert not read_elf(str(copy)).has_symtab
    debug = tmp_path / "debug" / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    debug.parent.mkdir(parents=True)
    shutil.copyfile(original, debug)  # the unstripped file serves as its own debug file
    monkeypatch.setenv("LOTUS_DEBUG_DIRS", os.pathsep.join([str(tmp_path / "nowhere"), str(tmp_path / "debug")]))
    elf = read_elf(str(copy))
    assert elf.has_symtab and elf.debug_file == str(debug)
    ref = read_elf(original)
    start = ref.starts[ref.names.index("ImagingFlipLeftRight")]
    assert elf.lookup(start + 4)[0] == "ImagingFlipLeftRight"


def test_library_stem():
    assert library_stem("/x/libjpeg-6dc8d115.so.62.4.0") == "libjpeg"
    assert library_stem("libjpeg.67fb65bd.so.8") == "libjpeg"
    assert library_stem("libc.so.6") == "libc"
