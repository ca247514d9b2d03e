"""What a run holds: its files, DataLoaders, time span and event counts (``lotus info``)."""

from __future__ import annotations

import numpy as np


def run_info(events, batches=None) -> dict:
    """Summary of one run's events DataFrame (``events.attrs["files"]`` lists the files read)."""
    files = []
    for f in events.attrs.get("files", []):
        files.append({k: f.get(k) for k in ("path", "format", "role", "pid", "rank", "worker_id", "events",
                                            "clean_close", "hostname")})
    loaders = {}
    for f in events.attrs.get("files", []):
        for key, desc in (f.get("loaders") or {}).items():
            loaders[f"r{f.get('rank', 0)}/loader{key}"] = desc
    counts = events["name"].value_counts(sort=False)
    start = events["start_ns"].to_numpy()
    end = start + events["dur_ns"].to_numpy()
    span = {"start_ns": int(start.min()), "end_ns": int(end.max()),
            "duration_s": float(int(end.max()) - int(start.min())) / 1e9} if len(events) else None
    out = {
        "run": events.attrs.get("run"),
        "path": events.attrs.get("path"),
        "files": files,
        "loaders": loaders,
        "ranks": sorted(int(r) for r in np.unique(events["rank"].to_numpy())),
        "epochs": sorted(int(e) for e in np.unique(events["epoch"].to_numpy())),
        "events": len(events),
        "span": span,
        "event_counts": {str(k): int(v) for k, v in counts.items() if v > 0},
        "unclean_files": sum(1 for f in files if f["clean_close"] is False),
    }
    if batches is not None:
        out["batches"] = {"prepared": int(batches["prep_dur_ns"].notna().sum()),
                          "consumed": int(batches["consumed_ns"].notna().sum())}
    return out
