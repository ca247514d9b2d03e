"""What-if tables on a fitted model: workers x CPUs x page-cache sizes, and the cache what-if.

Every number comes from :meth:`PipelineModel.predict` (cache sizes enter as hit rates from
:mod:`lotus.model.cache`); nothing here has a formula of its own. GB = 10^9 bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lotus.errors import InputError
from lotus.model.params import PipelineModel

GB = 1e9
TABLE_COLUMNS = ["num_workers", "cpus", "cache_gb", "cache_hit_rate", "samples_per_s", "wait_share", "bottleneck",
                 "input_samples_per_s", "step_samples_per_s", "busy_workers", "bound", "reason"]


def _powers(upto: float) -> list[int]:
    out, v = [], 1
    while v <= upto:
        out.append(v)
        v *= 2
    return out


def default_grid(model: PipelineModel) -> tuple[list[int], list[float | None]]:
    """Workers 0, 1, 2, 4... up to 2x the traced CPUs (and the traced count); CPUs 1, 2, 4... up to the
    traced CPUs (None when the trace does not say)."""
    t = model.traced
    cpus = t.cpus
    top = 2 * cpus if cpus else 4 * max(t.num_workers, 1)
    workers = sorted({0, *_powers(top), int(top), t.num_workers})
    cpu_list = sorted({*_powers(cpus), cpus}) if cpus else [None]
    return workers, [float(c) if c is not None else None for c in cpu_list]


def prediction_table(model: PipelineModel, workers, cpus, *, cache: list[tuple[float, float | None]] | None = None,
                     batch_size: int | None = None, prefetch_factor: int | None = None):
    """One row per (workers, cpus, cache size): :data:`TABLE_COLUMNS`.

    ``cache``: ``[(cache_gb, hit_rate), ...]``; None: the page cache as in the traced run (``cache_gb``
    None). A hit rate of None (unknown) gives rows with a reason.
    """
    import pandas as pd

    rows = []
    for gb, hit in cache or [(None, None)]:
        for w in workers:
            for c in cpus:
                if gb is not None and hit is None:
                    rows.append({"num_workers": int(w), "cpus": c, "cache_gb": gb, "cache_hit_rate": None,
                                 "samples_per_s": None, "wait_share": None, "bottleneck": None,
                                 "reason": "hit rate unknown for this cache size"})
                    continue
                p = model.predict(int(w), c, batch_size=batch_size, cache_hit_rate=hit,
                                  prefetch_factor=prefetch_factor)
                rows.append({"num_workers": p.num_workers, "cpus": c, "cache_gb": gb, "cache_hit_rate": hit,
                             **{k: getattr(p, k) for k in TABLE_COLUMNS[4:]}})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def dataset_bytes_of(path: str | os.PathLike, dataset_len: int | None = None, *, n: int = 256,
                     seed: int = 0) -> dict:
    """Bytes per sample from the sizes of ``n`` random files under ``path`` (a directory of the dataset's
    files, one file per sample): ``{"bytes_per_sample", "dataset_bytes", "files", "sampled", "paths"}``."""
    root = Path(path)
    if not root.is_dir():
        raise InputError("not a directory of dataset files", root)
    names: list[str] = []
    for dirpath, _dirs, files in os.walk(root):
        names.extend(os.path.join(dirpath, f) for f in files)
    if not names:
        raise InputError("no files here to estimate the dataset size from", root)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(names), size=min(n, len(names)), replace=False)
    sizes = []
    for i in pick:
        try:
            sizes.append(os.stat(names[i]).st_size)
        except OSError:
            continue
    if not sizes:
        raise InputError("cannot stat the dataset files", root)
    per = float(np.mean(sizes))
    count = dataset_len or len(names)
    return {"bytes_per_sample": per, "dataset_bytes": per * count, "files": len(names), "sampled": len(sizes),
            "paths": names}


def cache_hits(access, dataset_len: int | None, *, fractions, n_epochs: int = 3, sizes_bytes=None,
               seed: int = 0, policies=None):
    """Per-epoch hit rates (:func:`lotus.model.cache.cache_hit_rates`) of the run's recorded sample order;
    None when the trace holds no sample indices (original LotusTrace logs).

    ``access``: an :class:`lotus.model.accessorder.AccessOrder` (what the simulation reads, from
    :func:`lotus.model.accessorder.access_order`: the flat path of ``lotus whatif``) or an events
    DataFrame (every event in memory, through :func:`lotus.model.cache.access_epochs`): the same rows.
    ``policies``: those of :func:`~lotus.model.cache.cache_hit_rates` (default: every one)."""
    from lotus.model.accessorder import AccessOrder, order_of_epochs
    from lotus.model.cache import POLICIES, access_epochs, cache_hit_rates

    n_epochs = max(n_epochs, 1)
    order = access if isinstance(access, AccessOrder) else order_of_epochs(access_epochs(access), n_epochs)
    if not order.epochs:
        return None
    # the dataset's length as the simulation takes it from every recorded epoch (order.seen), the kind too
    return cache_hit_rates(order.epochs, max(int(dataset_len or 0), order.seen), n_epochs=n_epochs,
                           fractions=fractions, sizes_bytes=sizes_bytes, kind=order.kind, seed=seed,
                           policies=POLICIES if policies is None else policies)


def cache_throughput(model: PipelineModel, hits, *, num_workers: int | None = None, cpus: float | None = None,
                     batch_size: int | None = None):
    """``hits`` (rows with a ``hit_rate``) + the model's prediction at each: samples_per_s, wait_share,
    bottleneck, reason. Defaults: the traced workers and CPUs."""
    t = model.traced
    w = t.num_workers if num_workers is None else num_workers
    c = t.cpus if cpus is None else cpus
    memo: dict[float, object] = {}
    out = hits.copy()
    cols = {k: [] for k in ("samples_per_s", "wait_share", "bottleneck", "reason")}
    for h in out["hit_rate"].to_numpy(dtype=np.float64):
        key = round(float(h), 6)
        if key not in memo:
            memo[key] = model.predict(w, c, batch_size=batch_size, cache_hit_rate=key)
        p = memo[key]
        for k, values in cols.items():
            values.append(getattr(p, k))
    for k, v in cols.items():
        out[k] = v
    out["num_workers"], out["cpus"] = w, c
    return out


def hit_rate_at(steady, cache_gb: float, dataset_bytes: float, policy: str = "lru") -> float:
    """The steady hit rate of ``policy`` at ``cache_gb``, interpolated over the simulated fractions."""
    s = steady[steady["policy"] == policy].sort_values("cache_frac")
    frac = min(max(cache_gb * GB / dataset_bytes, 0.0), 1.0)
    return float(np.interp(frac, s["cache_frac"].to_numpy(), s["hit_rate"].to_numpy()))


__all__ = ["GB", "TABLE_COLUMNS", "cache_hits", "cache_throughput", "dataset_bytes_of", "default_grid",
           "hit_rate_at", "prediction_table"]
