"""The demo's closing summary, computed from the trace it just wrote."""

from __future__ import annotations

import math

from lotus.demo.train import DemoResult


def summarize(result: DemoResult) -> dict:
    """Headline numbers of a demo run (dict with a ``lines`` list for the terminal)."""
    from lotus.query import batches_from_events
    from lotus.trace import load_events

    events = load_events(result.trace_dir)
    batches = batches_from_events(events)
    from lotus.analysis.diagnosis import verdict as diagnose

    v = diagnose(events, batches)
    used = batches[batches["consumed_ns"].notna()]
    wait_ms = used["wait_dur_ns"].astype("float64") / 1e6
    wait_share = v["wait_share"] or 0.0
    verdict = {"fine": "fine: the input pipeline keeps up"}.get(v["class"], v["class"])
    prep_ms = batches["prep_dur_ns"].astype("float64") / 1e6
    per_sample = events[events["cat"].isin(["op", "sample"]) & events["name"].isin(
        [*[str(n) for n in events.loc[events["cat"] == "op", "name"].unique()], "load"])]
    op_ms = (per_sample.groupby("name", observed=True)["dur_ns"].mean() / 1e6).sort_values(ascending=False)
    collate_ms = events.loc[events["name"] == "collate", "dur_ns"].mean() / 1e6
    names = {"load": "Loader"}
    ops = {names.get(str(k), str(k)): round(float(v), 3) for k, v in op_ms.items()}
    files = events.attrs.get("files", [])
    out = {
        "model": result.model, "device": result.device, "steps": result.steps, "images": result.images,
        "train_s": round(result.train_s, 2), "images_per_s": round(result.images_per_s, 1),
        "trace_dir": str(result.trace_dir), "data_dir": str(result.data_dir),
        "trace_files": len(files), "events": len(events),
        "wait_share": round(wait_share, 4), "verdict": verdict,
        "steady_wait_share": None if v.get("steady_wait_share") is None else round(v["steady_wait_share"], 4),
        "suggestions": [x["text"] for x in v["suggestions"]],
        "mean_wait_ms": round(float(wait_ms.mean()), 2) if len(wait_ms) else None,
        "batch_prep_ms": {"mean": round(float(prep_ms.mean()), 2), "median": round(float(prep_ms.median()), 2)},
        "op_mean_ms_per_sample": ops,
        "collate_mean_ms_per_batch": None if math.isnan(collate_ms) else round(float(collate_ms), 3),
        "losses": [round(x, 4) for x in result.losses],
    }
    op_text = ", ".join(f"{k} {v:.2f}" for k, v in list(ops.items())[:6])
    out["lines"] = [
        f"lotus demo: {result.steps} steps of {result.model} on {result.device}: {result.train_s:.1f} s "
        f"({result.images_per_s:.1f} images/s)",
        f"trace: {result.trace_dir} ({len(files)} files, {len(events):,} events)",
        f"the training loop waited for data {wait_share:.0%} of its time: {verdict}"
        + ("" if v.get("steady_wait_share") is None or v["class"] == v.get("steady_class") else
           f" (steady state, first batch of each epoch left out: {v['steady_wait_share']:.0%}, "
           f"{v['steady_class']})"),
        f"preprocessing per batch on a worker: mean {out['batch_prep_ms']['mean']:.1f} ms; "
        f"per image (ms): {op_text}; collation {out['collate_mean_ms_per_batch']} ms per batch",
        *(f"suggestion: {x['text']}" for x in v["suggestions"][:1]),
        "next: lotus analyze verdict --data-dir " + str(result.trace_dir),
        "      lotus viz --data-dir " + str(result.trace_dir) + " --out trace.json  (open in ui.perfetto.dev)",
    ]
    return out
