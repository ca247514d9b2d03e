"""Hardware metrics per Python op, from the study's VTune grids, mapping and traces."""

from __future__ import annotations

import io
import logging

import pandas as pd
import pytest

from lotus.errors import InputError
from lotus.map import load_mapping, read_vtune_uarch
from lotus.map.hw import (
    UNMAPPED,
    attribute_hw,
    hw_tables,
    loose_name,
    op_metrics,
    read_uarch_dir,
    traced_op_seconds,
    with_derived,
)


@pytest.fixture(scope="module")
def intel_mapping(reference_dir):
    return load_mapping(reference_dir / "mapping_funcs.intel.json")


@pytest.fixture(scope="module")
def traced(reference_dir):
    return traced_op_seconds(reference_dir / "traces")


def test_traced_op_seconds(traced):
    b128 = traced[traced["run"] == "b128_gpu4"].set_index("op")
    assert set(b128.index) == {"Loader", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize",
                               "Collation"}
    assert b128.loc["Loader", "events"] == 1664
    assert b128.loc["Loader", "cpu_s"] == pytest.approx(11.274966135)
    assert b128.loc["Collation", "events"] == 13
    assert b128.loc["Collation", "cpu_s"] == pytest.approx(0.791580304)
    assert sorted(traced["run"].unique()) == ["b128_gpu4", "b256_gpu2", "b512_gpu1"]


def test_every_function_lands_somewhere_and_totals_are_kept(uarch_dir, intel_mapping, traced):
    for f in sorted(uarch_dir.glob("*.csv")):
        grid = read_vtune_uarch(f)
        secs = traced.groupby("op")["cpu_s"].sum().to_dict()
        rows = attribute_hw(grid, intel_mapping, secs, f.stem)
        for col in ("cpu_time_s", "clockticks", "instructions_retired"):
            assert rows[col].sum() == pytest.approx(grid[col].sum(), rel=1e-9), (f, col)
        assert rows.groupby("function", sort=False)["share"].sum().to_numpy() == pytest.approx(1.0)
        # Every function of the study's mapping that VTune saw is attributed to its op(s).
        assert set(rows.loc[rows["op"] == "Loader", "function"]) >= {"decode_mcu", "jpeg_idct_islow", "ycc_rgb_convert"}
        assert set(rows.loc[rows["op"] == "RandomResizedCrop", "function"]) >= {
            "ImagingResampleHorizontal_8bpc", "ImagingResampleVertical_8bpc"}


def test_shared_functions_split_by_traced_time_or_reported_shared(uarch_dir, intel_mapping, traced):
    grid = read_vtune_uarch(uarch_dir / "b1024_gpu4_dataloader8.csv")
    secs = traced.groupby("op")["cpu_s"].sum().to_dict()
    rows = attribute_hw(grid, intel_mapping, secs, "c8")
    memmove = rows[rows["function"] == "__memmove_avx_unaligned_erms"].set_index("op")
    owners = ["Loader", "RandomResizedCrop", "ToTensor"]
    assert sorted(memmove.index) == owners
    assert set(memmove["split"]) == {"trace"}
    total = sum(secs[o] for o in owners)
    for o in owners:
        assert memmove.loc[o, "share"] == pytest.approx(secs[o] / total)
    full = grid.loc[grid["function"] == "__memmove_avx_unaligned_erms", "cpu_time_s"].item()
    assert memmove["cpu_time_s"].sum() == pytest.approx(full)
    # The top-down fractions of a function stay its own whatever its share.
    own = grid.loc[grid["function"] == "__memmove_avx_unaligned_erms", "retiring_frac"].item()
    assert own == pytest.approx(0.062)
    assert memmove["retiring_frac"].to_numpy() == pytest.approx([own] * 3)
    no_trace = attribute_hw(grid, intel_mapping, None, "c8")
    shared = no_trace[no_trace["function"] == "__memmove_avx_unaligned_erms"]
    assert list(shared["op"]) == ["[shared] Loader, RandomResizedCrop, ToTensor"]
    assert list(shared["split"]) == ["shared"] and shared["cpu_time_s"].item() == pytest.approx(full)
    assert (no_trace["op"] == UNMAPPED).sum() == (rows["op"] == UNMAPPED).sum() > 0


def test_split_uses_mapping_weights_when_present():
    grid = pd.DataFrame({"function": ["memcpy", "decode"], "module": [None, None], "cpu_time_s": [10.0, 5.0],
                         "clockticks": [40.0, 20.0], "instructions_retired": [10.0, 40.0]})
    mapping = {"op_to_func": {"A": ["decode|libjpeg.so", "memcpy|libc.so.6"], "B": ["memcpy|libc.so.6"]},
               "weights": {"A": {"decode|libjpeg.so": 0.9, "memcpy|libc.so.6": 0.1}, "B": {"memcpy|libc.so.6": 0.8}}}
    rows = attribute_hw(grid, mapping, {"A": 2.0, "B": 1.0}, "x")
    mem = rows[rows["function"] == "memcpy"].set_index("op")
    # A: 2 s x 10% = 0.2 s expected in memcpy, B: 1 s x 80% = 0.8 s -> 20% / 80% of memcpy.
    assert mem.loc["A", "share"] == pytest.approx(0.2) and mem.loc["B", "share"] == pytest.approx(0.8)
    assert set(mem["split"]) == {"trace*weight"}
    ops = op_metrics(rows).set_index("op")
    assert ops.loc["A", "cpu_time_s"] == pytest.approx(5.0 + 2.0)
    assert ops.loc["A", "cpi"] == pytest.approx((20 + 8) / (40 + 2))
    assert ops.loc["B", "cpi"] == pytest.approx(32 / 8)
    assert ops.loc["A", "average_frequency_ghz"] == pytest.approx(28 / 7 / 1e9)
    assert ops["cpu_time_share"].sum() == pytest.approx(1.0)


def test_op_metrics_recompute_ratios(uarch_dir, intel_mapping):
    grid = read_vtune_uarch(uarch_dir / "b1024_gpu4_dataloader16.csv")
    rows = attribute_hw(grid, intel_mapping, None, "c16")
    ops = op_metrics(rows).set_index("op")
    rrc = rows[rows["op"] == "RandomResizedCrop"]
    cpi = rrc["clockticks"].sum() / rrc["instructions_retired"].sum()
    assert ops.loc["RandomResizedCrop", "cpi"] == pytest.approx(cpi)
    expect = (rrc["retiring_frac"] * rrc["clockticks"]).sum() / rrc["clockticks"].sum()
    assert ops.loc["RandomResizedCrop", "retiring_frac"] == pytest.approx(expect)
    assert ops.loc["RandomResizedCrop", "functions"] == rrc["function"].nunique()
    assert list(ops.index[-1:]) == [UNMAPPED]  # mapped ops first, then the bracketed ones
    td = ["retiring_frac", "front_end_bound_frac", "bad_speculation_frac", "memory_bound_frac", "core_bound_frac"]
    assert ops[td].sum(axis=1).to_numpy() == pytest.approx(1.0, abs=0.05)  # VTune rounds to 0.1%


def test_memory_bound_is_derived_from_level_one(uarch_dir):
    grid = with_derived(read_vtune_uarch(uarch_dir / "b1024_gpu4_dataloader12.csv"))
    dec = grid[grid["function"] == "decode_mcu"].iloc[0]
    assert dec["memory_bound_frac"] == pytest.approx(1 - 0.396 - 0.087 - 0.397 - 0.074)
    assert grid.attrs["derived"] == ["memory_bound_frac"]
    assert grid["memory_bound_frac"].between(0, 1).all()


def test_loose_names_match_other_builds():
    assert loose_name("_ImagingResampleHorizontal_8bpc") == "ImagingResampleHorizontal_8bpc"
    assert loose_name("vectorized_loop<foo>.isra.0") == "vectorized_loop<foo>"
    assert loose_name("void at::native::cat_serial_kernel(at::Tensor const&)") == "at::native::cat_serial_kernel"
    assert loose_name("func@0x3fd7b0") == "func@0x3fd7b0"
    grid = pd.DataFrame({"function": ["ImagingResampleHorizontal_8bpc", "decode_mcu"], "module": [None, None],
                         "cpu_time_s": [1.0, 2.0]})
    mapping = {"op_to_func": {
        "RandomResizedCrop": ["_ImagingResampleHorizontal_8bpc|_imaging.cpython-311-x86_64-linux-gnu.so"],
        "Loader": ["decode_mcu|libjpeg-6dc8d115.so.62.4.0"]}}
    rows = attribute_hw(grid, mapping).set_index("function")
    assert rows.loc["ImagingResampleHorizontal_8bpc", ["op", "match"]].tolist() == ["RandomResizedCrop", "loose"]
    assert rows.loc["decode_mcu", ["op", "match"]].tolist() == ["Loader", "exact"]


def test_hw_tables_golden(uarch_dir, intel_mapping, reference_dir, golden_dir):
    tables = hw_tables(uarch_dir, intel_mapping, reference_dir / "traces")
    assert tables["split_basis"] == dict.fromkeys(
        ["b1024_gpu4_dataloader8", "b1024_gpu4_dataloader12", "b1024_gpu4_dataloader16"], "pooled")
    ops = tables["ops"]
    buf = io.StringIO()
    ops.round(6).to_csv(buf, index=False, lineterminator="\n")
    assert buf.getvalue() == (golden_dir / "hw_ops_intel_traced.csv").read_text()
    loader8 = ops[(ops["config"] == "b1024_gpu4_dataloader8") & (ops["op"] == "Loader")].iloc[0]
    assert 0.5 < loader8["cpu_time_share"] < 0.6  # the decoder is more than half of the CPU time


def test_read_uarch_dir_with_summary_and_a_bad_file(tmp_path, uarch_dir, caplog):
    (tmp_path / "b8.csv").write_bytes((uarch_dir / "b1024_gpu4_dataloader8.csv").read_bytes())
    (tmp_path / "b8_summary.txt").write_text("Elapsed Time: 100.5s\n    CPU Time: 2000s\n")
    (tmp_path / "broken.csv").write_text("Module\tSomething\nx\ty\n")
    with caplog.at_level(logging.WARNING, logger="lotus.map"):
        grids, summaries = read_uarch_dir(tmp_path)
    assert list(grids) == ["b8"]
    assert summaries["b8"]["elapsed_time_s"] == 100.5
    assert "broken.csv" in caplog.text
    single, _ = read_uarch_dir(tmp_path / "b8.csv")
    assert list(single) == ["b8"]
    (tmp_path / "b8.csv").unlink()
    with pytest.raises(InputError, match="no readable VTune microarchitecture grid"):
        read_uarch_dir(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_uarch_dir(tmp_path / "absent")


def test_figures_from_data(uarch_dir, intel_mapping, traced):
    from matplotlib.figure import Figure

    from lotus.map import plots

    tables = hw_tables(uarch_dir, intel_mapping, None)
    functions = tables["functions"]
    data = plots.function_stack_data(functions, "cpu_time_s", top=5)
    assert list(data.columns[:2]) == ["decode_mcu", "jpeg_idct_islow"] and data.columns[-1] == "other"
    assert len(data.columns) == 6
    assert data.sum(axis=1).to_numpy() == pytest.approx(
        functions.groupby("config")["cpu_time_s"].sum().reindex(data.index).to_numpy())
    assert list(data.index) == ["b1024_gpu4_dataloader8", "b1024_gpu4_dataloader12", "b1024_gpu4_dataloader16"]
    figs = [plots.plot_function_stacks(functions, "clockticks", top=5), plots.plot_function_topdown(functions, 6),
            plots.plot_op_metrics(tables["ops"]), plots.plot_trace_ops(traced),
            plots.plot_elapsed(pd.DataFrame({"config": ["a", "b"], "elapsed_time_s": [1.0, 2.0]}))]
    for fig in figs:
        assert isinstance(fig, Figure)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=40)
        assert buf.getvalue()[:4] == b"\x89PNG"
    stack_ax = figs[0].axes[0]
    assert len(stack_ax.patches) == 3 * 6  # 3 configs x (5 functions + other)
    assert len(figs[2].axes) == 8  # CPU time, CPI, 5 top-down shares, frequency
    assert len(figs[3].axes[0].patches) == 3 * 6  # 3 traced runs x 6 ops
