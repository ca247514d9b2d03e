"""Figures are tested by the data they draw (Agg, no window)."""

from __future__ import annotations

import numpy as np
import pytest

from lotus.analysis import plotdata, plots
from lotus.analysis.runs import load_config, load_configs


@pytest.fixture(scope="module")
def reference_configs(reference_dir):
    return load_configs(reference_dir / "traces")


def test_preprocessing_box_draws_each_config(reference_configs):
    df = plotdata.preprocessing_frame([(c.name, c.batches) for c in reference_configs])
    fig = plots.preprocessing_box(df)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b128_gpu4", "b256_gpu2", "b512_gpu1"]
    assert "ms" in ax.get_ylabel()
    # the box medians are the per-config medians
    meds = [np.median(df.loc[df["config"] == c, "prep_ms"]) for c in ("b128_gpu4", "b256_gpu2", "b512_gpu1")]
    drawn = np.array([float(y) for line in ax.lines for y in line.get_ydata()])
    for m in meds:
        assert np.isclose(drawn, m).any()


def test_op_distributions_log_scale(reference_configs):
    df = plotdata.op_frame([(c.name, c.events) for c in reference_configs[:1]])
    fig = plots.op_distributions(df)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["load", "RandomResizedCrop"]


def test_op_cpu_seconds_stack_adds_up(reference_configs):
    df = plotdata.op_seconds_frame([(c.name, c.events) for c in reference_configs])
    fig = plots.op_cpu_seconds(df)
    ax = fig.axes[0]
    tops = {}
    for bar in ax.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0), bar.get_y() + bar.get_height())
    totals = df.groupby("config", sort=False)["cpu_s"].sum().to_numpy()
    assert np.allclose([tops[i] for i in range(3)], totals)
    assert "transform" not in set(df["op"])  # overlapping totals are not stacked


def test_wait_plot_data_and_500ms_line(straggler_run):
    b = load_config(straggler_run).batches
    df = plotdata.wait_frame(b, sort="batch_id")
    fig = plots.wait_plot(df)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert any(np.allclose(line.get_ydata(), 500) for line in ax.lines)
    plotted = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections])
    assert sorted(np.round(plotted, 6)) == sorted(np.round(np.maximum(df["wait_ms"].to_numpy(), 1e-3), 6))
    fig2 = plots.wait_plot(plotdata.wait_frame(b, sort="duration"), sort="duration")
    y = fig2.axes[0].lines[0].get_ydata()
    assert np.all(np.diff(y) <= 0)


def test_timeline_lanes(synth_native):
    df = plotdata.timeline_frame(load_config(synth_native).batches)
    assert set(df["lane"]) == {"worker 0", "worker 1", "training loop"}
    assert set(df["kind"]) == {"preprocessing", "wait", "step"}
    fig = plots.worker_timeline(df)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["worker 0", "worker 1", "training loop"]
    assert sum(len(c.get_paths()) for c in fig.axes[0].collections) == len(df)


def test_empty_inputs_give_a_figure(reference_configs):
    b = reference_configs[0].batches
    fig = plots.wait_plot(plotdata.wait_frame(b))  # no waits in old logs
    assert "unknown" in fig.axes[0].texts[0].get_text()


def test_save_png_and_svg(synth_native, tmp_path):
    cfg = load_config(synth_native)
    fig = plots.delay_plot(plotdata.delay_frame(cfg.batches))
    paths = plots.save_figure(fig, tmp_path, "delay")
    assert [p.suffix for p in paths] == [".png", ".svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in paths[1].read_bytes()[:400]


def test_all_figures_names(synth_native):
    names = [n for n, _ in plots.all_figures([load_config(synth_native)])]
    assert names == ["preprocessing_box", "op_times", "op_cpu_seconds", "wait_native", "delay_native",
                     "timeline_native"]
