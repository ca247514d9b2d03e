"""HTML report, diff of two runs, run info, Parquet export, and the lazy, torch-free package."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import pandas as pd
import pytest

from lotus.analysis import build_report, diff_runs, export_parquet, render_html, run_info
from lotus.analysis.export import read_parquet_attrs
from lotus.analysis.runs import load_config, load_configs


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.imgs, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href"):
                (self.imgs if tag == "img" else self.refs).append(v)


def test_report_is_self_contained(synth_native, reference_dir):
    configs = [load_config(synth_native), load_config(reference_dir / "traces" / "b128_gpu4")]
    rep = build_report(configs)
    html = render_html(rep, [("a figure", b"\x89PNG\r\n\x1a\nfake")])
    p = _Refs()
    p.feed(html)
    assert "script" not in p.tags and "link" not in p.tags and p.refs == []
    assert p.imgs and all(src.startswith("data:image/png;base64,") for src in p.imgs)
    assert "native" in html and "b128_gpu4" in html and "unknown" in html
    assert rep["configs"]["native"]["verdict"]["class"] in html
    json.dumps(rep, default=str)


def test_diff_of_a_run_with_itself_is_zero(synth_native):
    c = load_config(synth_native)
    d = diff_runs(c.events, c.batches, c.events, c.batches)
    assert d["batches"]["matched"] == 12 and d["batches"]["slower"] == 0 and d["slower"] == []
    assert all(v["mean"]["change"] == 0 for v in d["ops_ms"].values())


def test_diff_finds_what_got_slower(reference_dir):
    a = load_config(reference_dir / "traces" / "b128_gpu4")
    b = load_config(reference_dir / "traces" / "b512_gpu1")
    d = diff_runs(a.events, a.batches, b.events, b.batches)
    slower = [s["what"] for s in d["slower"]]
    assert slower[0] in ("batch preprocessing", "collate")
    assert d["ops_ms"]["collate"]["mean"]["change_pct"] > 200
    assert abs(d["ops_ms"]["load"]["mean"]["change_pct"]) < 20
    assert d["batches"]["matched"] == 8 and d["batches"]["only_in_a"] == 5


def test_run_info(real_run):
    c = load_config(real_run)
    inf = run_info(c.events, c.batches)
    roles = sorted(f["role"] for f in inf["files"])
    assert roles.count("main") == 1 and roles.count("worker") == 4  # two workers, two epochs
    assert all(f["clean_close"] for f in inf["files"])
    (desc,) = inf["loaders"].values()  # its id depends on the loaders this process made before
    assert desc["num_workers"] == 2
    assert inf["event_counts"]["fetch"] == 16 and inf["batches"]["consumed"] == 16
    assert inf["epochs"] == [0, 1]


def test_export_parquet_round_trip(synth_native, tmp_path):
    c = load_config(synth_native)
    ev_path, b_path = export_parquet(c.events, c.batches, tmp_path)
    ev = pd.read_parquet(ev_path)
    b = pd.read_parquet(b_path)
    assert ev["start_ns"].tolist() == c.events["start_ns"].tolist()
    assert ev["name"].astype(str).tolist() == c.events["name"].astype(str).tolist()
    assert b["consumed_ns"].tolist() == c.batches["consumed_ns"].tolist()
    assert read_parquet_attrs(ev_path)["run"] == "native"


def test_natural_sort_of_configs(tmp_path):
    from lotus.trace.synthetic import PipelineSpec, write_native

    for name in ("b128_w2", "b16_w2", "b8_w2"):
        write_native(tmp_path / name, PipelineSpec(n_batches=2, batch_size=2, n_workers=1))
    assert [c.name for c in load_configs(tmp_path)] == ["b8_w2", "b16_w2", "b128_w2"]


@pytest.mark.timeout(60)
def test_analysis_is_lazy_and_torch_free():
    code = ("import sys, lotus.analysis as a; assert 'pandas' not in sys.modules; "
            "a.verdict; a.write_chrome_trace; a.all_figures; a.write_report; a.diff_runs; a.run_info; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'matplotlib.pyplot' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
