"""Preprocessing statistics: definitions, outlier rule, op order, and the original study's magnitudes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lotus.analysis import config_stats, describe_ms, op_names, op_stats, preprocessing_stats, stats_table
from lotus.analysis.runs import load_config, load_configs
from lotus.analysis.stats import STAT_KEYS, outlier_floor_ns, split_outliers


def test_describe_matches_numpy_and_pandas():
    rng = np.random.default_rng(0)
    ns = rng.lognormal(15, 0.5, 1000)
    d = describe_ms(ns)
    ms = ns / 1e6
    assert set(d) == set(STAT_KEYS)
    assert d["count"] == 1000
    assert d["mean"] == pytest.approx(ms.mean())
    assert d["std"] == pytest.approx(ms.std(ddof=0))  # population std
    assert d["std_pct"] == pytest.approx(ms.std() / ms.mean() * 100)
    s = pd.Series(ms)
    for key, q in (("p25", 0.25), ("median", 0.5), ("p75", 0.75), ("p90", 0.9), ("p99", 0.99)):
        assert d[key] == pytest.approx(s.quantile(q))
    assert d["iqr"] == pytest.approx(d["p75"] - d["p25"])
    assert d["sum"] == pytest.approx(ms.sum())
    assert (d["min"], d["max"]) == (pytest.approx(ms.min()), pytest.approx(ms.max()))


def test_describe_empty_and_nan():
    assert describe_ms([])["count"] == 0
    assert describe_ms([])["mean"] is None
    assert describe_ms([np.nan, 2e6])["mean"] == 2.0


def test_outlier_rule_drops_only_low_batches():
    durs = np.array([100, 101, 99, 100, 102, 98, 100, 5, 400]) * 1e6  # a short last batch and a slow one
    b = pd.DataFrame({"rank": 0, "loader": 0, "epoch": 0, "batch_id": range(len(durs)),
                      "prep_dur_ns": pd.array(durs.astype("int64"), dtype="Int64")})
    q1, q3 = np.percentile(durs, [25, 75])
    assert outlier_floor_ns(durs) == pytest.approx(q1 - 2 * (q3 - q1))
    _kept, dropped = split_outliers(b)
    assert dropped["batch_id"].tolist() == [7]  # the slow batch stays: the rule is one-sided
    assert preprocessing_stats(b, remove_outliers=True)["count"] == 8


def test_remove_outliers_drops_their_ops_too(synth_native):
    cfg = load_config(synth_native)
    b = cfg.batches.copy()
    b.loc[b.index[-1], "prep_dur_ns"] = 1  # make the last batch an outlier
    st = config_stats(cfg.events, b, remove_outliers=True)
    assert st["outliers_removed"] == 1
    full = op_stats(cfg.events)
    assert st["ops_ms"]["load"]["count"] == full["load"]["count"] - 4  # its 4 samples are gone
    assert st["ops_ms"]["collate"]["count"] == full["collate"]["count"] - 1


def test_op_order_is_pipeline_order(synth_native):
    cfg = load_config(synth_native)
    assert op_names(cfg.events) == ["load", "RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize",
                                    "transform", "sample", "collate"]


def test_per_rank_breakdown(ddp_run):
    cfg = load_config(ddp_run)
    per = preprocessing_stats(cfg.batches, by="rank")
    assert set(per) == {0, 1}
    assert per[0]["count"] == per[1]["count"] == 8
    assert preprocessing_stats(cfg.batches)["count"] == 16


def test_reference_magnitudes_match_the_study(reference_dir):
    """Per-op means of the real b128 logs have the study's magnitudes and ordering."""
    cfgs = {c.name: c for c in load_configs(reference_dir / "traces")}
    assert list(cfgs) == ["b128_gpu4", "b256_gpu2", "b512_gpu1"]  # natural order
    ops = op_stats(cfgs["b128_gpu4"].events)
    mean = {k: v["mean"] for k, v in ops.items()}
    # study (b128): Loader 4.69, RandomResizedCrop 1.04, ToTensor 0.317, Normalize 0.211, Flip 0.058, Collation 49.8
    assert 2 < mean["load"] < 12
    assert 0.5 < mean["RandomResizedCrop"] < 2.5
    assert 0.15 < mean["ToTensor"] < 1.0
    assert 0.1 < mean["Normalize"] < 0.8
    assert 0.02 < mean["RandomHorizontalFlip"] < 0.2
    assert 25 < mean["collate"] < 100
    assert mean["load"] > mean["RandomResizedCrop"] > mean["ToTensor"] > mean["Normalize"] > mean[
        "RandomHorizontalFlip"]
    # collation scales with the batch size
    collate = [op_stats(cfgs[n].events)["collate"]["mean"] for n in ("b128_gpu4", "b256_gpu2", "b512_gpu1")]
    assert collate[0] < collate[1] < collate[2]
    assert collate[2] / collate[0] == pytest.approx(4, rel=0.35)
    # each config: 128/256/512 samples per batch
    for name, bs in (("b128_gpu4", 128), ("b256_gpu2", 256), ("b512_gpu1", 512)):
        assert (cfgs[name].batches["n_samples"].dropna() == bs).all()


def test_stats_table_long_form(synth_native):
    cfg = load_config(synth_native)
    t = stats_table({"a": config_stats(cfg.events, cfg.batches)})
    assert t.columns.tolist() == ["config", "what", "name", *STAT_KEYS]
    assert t.iloc[0]["name"] == "batch preprocessing"
    assert set(t["what"]) == {"batch", "op"}
