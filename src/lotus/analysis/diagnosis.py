"""The verdict: is the input pipeline the bottleneck, where, and what to change.

* Training-loop time of a (rank, loader, epoch): from the first wait start to the last ``consumed``.
  Wait share = sum of waits / sum of loop times (ranks merged; ``per_rank`` breaks it down).
  Class: < 5 % ``fine``, 5-20 % ``input-bound``, > 20 % ``severely input-bound``; ``unknown`` for
  runs without wait events.
* Steady state: the same share without the first batch of each (rank, loader, epoch), whose wait is
  worker start-up and cold reads; short runs are often "input-bound" only because of it, and the
  suggestions then say so instead of asking for more workers.
* Slowest op: the part of preprocessing (load, a transform op, collate) with the largest total time,
  with its share of all batch preprocessing time.
* Worker utilisation: sum of a worker's batch preprocessing (``fetch``) durations / span of the epoch
  (first dispatch, wait or preprocessing start to last consumption or preprocessing end), summed
  over epochs.
* Batches only: failed batches (the fetch raised) count in none of these numbers, exhausted fetches
  (IterableDataset end) are no batches at all; ``outcomes`` says how many there were.
* Suggestions: concrete changes (more workers, ``in_order=False``, ``persistent_workers=True``,
  ``prefetch_factor``, a cheaper op), each with the evidence behind it.
"""

from __future__ import annotations

import math

import numpy as np

from lotus.analysis import compact, compactverdict
from lotus.analysis.shares import GROUP, epoch_spans_of, loop_spans_of, utilisation_of_parts
from lotus.analysis.stats import (
    PER_BATCH_OPS,
    _excluded_keys,
    op_durations,
    op_engine,
    op_mean_ci95_ms,
    op_table,
    prepared,
)
from lotus.analysis.wait import wait_stats
from lotus.query import detail_share, ok_batches, outcome_summary, worker_label

FINE, INPUT_BOUND, SEVERE, UNKNOWN = "fine", "input-bound", "severely input-bound", "unknown"
# parts of preprocessing a "slowest op" can be (totals like transform/sample overlap the others)
_NOT_OPS = {"transform", "sample"}
_OP_HINTS = {
    "load": "store smaller or pre-resized images, use a faster decoder (pillow-simd, torchvision.io.decode_jpeg, "
            "DALI), or cache decoded samples",
    "collate": "collate less data (uint8 tensors, normalise on the GPU) or a cheaper collate_fn",
    "RandomResizedCrop": "decode at reduced size before cropping (e.g. PIL draft mode, DALI's fused decode+crop)",
    "Normalize": "normalise on the GPU after the transfer, in uint8 -> float there",
    "ToTensor": "use torchvision.transforms.v2.PILToTensor (uint8) and convert on the GPU",
}


def classify(wait_share: float | None) -> str:
    if wait_share is None or (isinstance(wait_share, float) and math.isnan(wait_share)):
        return UNKNOWN
    if wait_share < 0.05:
        return FINE
    return INPUT_BOUND if wait_share <= 0.20 else SEVERE


def loop_spans(batches):
    """Per (rank, loader, epoch): training-loop span, total wait and wait share (ns)."""
    if compact.is_table(batches):
        return compactverdict.loop_spans(batches)
    return loop_spans_of([loop_span_sums(batches)])


def loop_span_sums(batches):
    """Per (rank, loader, epoch) of ``batches`` (a run's rows, or some of them: a piece): the loop's
    ``batches``, first wait start, last consumption and wait (:func:`loop_spans` of pieces:
    :func:`lotus.analysis.shares.loop_spans_of` of theirs); None without any such batch."""
    import pandas as pd

    batches = ok_batches(batches)
    ok = (batches["wait_dur_ns"].notna() & batches["consumed_ns"].notna()).to_numpy(dtype=bool, na_value=False)
    b = batches[ok]
    if b.empty:
        return None
    g = b.groupby(GROUP, sort=True)
    return pd.DataFrame({
        "batches": g.size(),
        "start_ns": g["wait_start_ns"].min().astype("int64"),
        "end_ns": g["consumed_ns"].max().astype("int64"),
        "wait_ns": g["wait_dur_ns"].sum().astype("int64"),
    }).reset_index()


def epoch_spans(batches):
    """Per (rank, loader, epoch): span of the epoch (ns) as used for worker utilisation."""
    return epoch_spans_of([epoch_bounds(batches)])


def epoch_bounds(batches):
    """Per (rank, loader, epoch) of ``batches`` (or a piece of them): first start and last end of its ok
    batches (Float64 ns), :func:`epoch_spans` before the span (of pieces:
    :func:`lotus.analysis.shares.epoch_spans_of` of theirs)."""
    import pandas as pd

    cols = ["dispatch_ns", "wait_start_ns", "prep_start_ns", "consumed_ns", "prep_end_ns"]
    b = ok_batches(batches)[[*GROUP, *cols]].copy()
    for c in cols:
        b[c] = b[c].astype("Float64")  # NA-aware min/max across columns
    start = b[["dispatch_ns", "wait_start_ns", "prep_start_ns"]].min(axis=1)
    end = b[["consumed_ns", "prep_end_ns"]].max(axis=1)
    t = pd.DataFrame({**{k: b[k] for k in GROUP}, "start": start, "end": end})
    g = t.groupby(GROUP, sort=True)
    # exact integers back from the nullable floats via the original columns would be overkill: a span
    # is a difference of ~1e9, so float64 rounding (<= 256 ns) is irrelevant here
    return pd.DataFrame({"start_ns": g["start"].min(), "end_ns": g["end"].max()}).reset_index()


def worker_utilisation(batches):
    """Per (rank, worker_id): busy time (sum of fetch durations), epoch span, busy share, batches."""
    if compact.is_table(batches):
        return compactverdict.worker_utilisation(batches)
    return utilisation_of_parts([worker_sums(batches)])


def worker_sums(batches):
    """Of ``batches`` (or a piece of them): (per (rank, worker_id, loader, epoch) the prepared batches and
    their preparation time, None without any; :func:`epoch_bounds`), what :func:`worker_utilisation` sums
    (of pieces: :func:`lotus.analysis.shares.utilisation_of_parts` of theirs)."""
    b = prepared(batches)
    if b.empty:  # its epochs' bounds still count where other pieces' batches of them were prepared
        return None, epoch_bounds(batches)
    b = b.assign(worker_id=b["worker_id"].fillna(-1).astype("int64"))
    per_epoch = b.groupby(["rank", "worker_id", *GROUP[1:]], sort=True).agg(
        batches=("batch_id", "size"), busy_ns=("prep_dur_ns", "sum")).reset_index()
    return per_epoch, epoch_bounds(batches)


def _prep_total(batches, *, detail_only: bool = False) -> float:
    if compact.is_table(batches):
        return compactverdict.prep_total_ns(batches, detail_only=detail_only)
    b = prepared(batches)
    if detail_only:
        b = b[b["detail"].to_numpy(dtype=bool, na_value=False)]
    return float(b["prep_dur_ns"].sum(skipna=True) or 0)


def slowest_ops(events, batches) -> list[dict]:
    """Parts of preprocessing by total time (largest first): name, calls, mean ms, total s, share.

    With per-op detail for a share of the batches, a per-sample op's calls and total are scaled to all
    batches, and its share of preprocessing is the ratio over the detail batches (its time in them / their
    preprocessing time): a part of a batch's preprocessing, never above 1 (detail batches cost a little
    more to record, so scaling their op time to all batches would overstate it)."""
    prep_total = _prep_total(batches)
    durations = None
    if op_engine(events) is not None:  # a scanned run: counts and sums from the engine (exact)
        sizes = {n: (t["count"], t.get("sum_ns", 0.0)) for n, t in op_table(events).items()}
    else:
        durations = op_durations(events)
        sizes = {n: (d.size, float(d.sum()) if d.size else 0.0) for n, d in durations.items()}
    sizes = {n: v for n, v in sizes.items() if n not in _NOT_OPS and v[0]}
    share = detail_share(events) if sizes else 1.0
    names = [n for n in sizes if n not in PER_BATCH_OPS]
    ci = {} if share >= 1.0 else (op_mean_ci95_ms(events, names) if durations is not None
                                  else op_engine(events).op_mean_ci95_ms(names, _excluded_keys(events, None)))
    detail_total = _prep_total(batches, detail_only=True) if share < 1.0 else prep_total
    rows = []
    for name, (calls, total) in sizes.items():
        scale = 1.0 if name in PER_BATCH_OPS else share  # per-sample ops of detail batches only: estimate
        base = prep_total if scale >= 1.0 else detail_total
        row = {"name": name, "calls": round(calls / scale), "mean_ms": total / calls / 1e6,
               "total_s": total / scale / 1e9,
               "share_of_preprocessing": total / base if base else None}
        if scale < 1.0:
            row.update(sampled_share=scale, calls_sampled=int(calls), mean_ci95_ms=ci.get(name))
        rows.append(row)
    return sorted(rows, key=lambda r: -r["total_s"])


MAX_WORKERS_NEEDED = 256  # beyond: the loop's own time is too short to say how many workers would hide the rest


def _workers_needed(prep_ns: float, loop_ns: float, wait_ns: float) -> int | None:
    """Workers whose preparation (``prep_ns`` in all) would overlap the loop's own time (its steps: loop - wait):
    ``ceil(prep / own)``; None when that time is too short to say (no division by a nanosecond floor)."""
    own = loop_ns - wait_ns
    if own <= 0 or prep_ns > MAX_WORKERS_NEEDED * own:
        return None
    return max(1, math.ceil(prep_ns / own))


def _own_share(loop_ns: float, wait_ns: float) -> float:
    return max(loop_ns - wait_ns, 0.0) / loop_ns if loop_ns > 0 else 0.0


def _loader_setting(loaders: dict, key: str):
    values = {d.get(key) for d in loaders.values() if isinstance(d, dict)}
    return values.pop() if len(values) == 1 else None


def verdict(events, batches, *, loaders: dict | None = None) -> dict:
    """The verdict of one run (see the module doc). ``loaders``: DataLoader descriptions, if known;
    ``batches``: a DataFrame or a scanned run's compact table (:mod:`lotus.analysis.compact`)."""
    loaders = loaders or {}
    pre = _at_once(batches)
    spans = pre["spans"] if pre else loop_spans(batches)
    ws = pre["ws"] if pre else wait_stats(batches)
    known = bool(ws["known"]) and not spans.empty and float(spans["span_ns"].sum()) > 0
    loop_ns = float(spans["span_ns"].sum()) if known else None
    wait_ns = float(spans["wait_ns"].sum()) if known else None
    share = wait_ns / loop_ns if known else None
    per_rank = {}
    if known:
        for rank, g in spans.groupby("rank", sort=True):
            s = float(g["span_ns"].sum())
            per_rank[int(rank)] = {"loop_s": s / 1e9, "wait_s": float(g["wait_ns"].sum()) / 1e9,
                                   "wait_share": float(g["wait_ns"].sum()) / s if s else None}
    startup_ns = (pre["startup"] if pre else _startup_wait_ns(batches)) if known else None
    steady = None
    if known and loop_ns - startup_ns > 0:
        steady = (wait_ns - startup_ns) / (loop_ns - startup_ns)
    util = pre["util"] if pre else worker_utilisation(batches)
    workers = {
        "count": len(util),
        "mean_busy_share": float(util["busy_share"].mean()) if len(util) else None,
        "per_worker": {worker_label(r, w): (None if np.isnan(s) else float(s))
                       for r, w, s in zip(util["rank"], util["worker_id"], util["busy_share"], strict=True)},
    }
    ops = slowest_ops(events, batches)
    out = {
        "class": classify(share),
        "wait_known": known,
        "wait_share": share,
        "loop_s": None if loop_ns is None else loop_ns / 1e9,
        "wait_s": None if wait_ns is None else wait_ns / 1e9,
        "startup_wait_s": None if startup_ns is None else startup_ns / 1e9,
        "steady_wait_share": steady,
        "steady_class": classify(steady),
        "batches": (compact.consumed_count(batches) if compact.is_table(batches)
                    else int(ok_batches(batches)["consumed_ns"].notna().sum())),
        "outcomes": outcome_summary(batches),
        "per_rank": per_rank,
        "slowest_op": ops[0] if ops else None,
        "ops": ops,
        "workers": workers,
        "head_of_line": ws.get("head_of_line"),
        "settings": {k: _loader_setting(loaders, k) for k in
                     ("num_workers", "prefetch_factor", "persistent_workers", "in_order", "pin_memory",
                      "batch_size", "cpus_available")},
    }
    out["suggestions"] = suggestions(out, spans, batches, first_wait_ns=pre.get("first"))
    return out


def _at_once(batches) -> dict:
    """A scanned run's table on 2+ CPUs: the verdict's passes over it at once (:mod:`lotus.analysis.overlap`),
    the first batches' waits among them (the suggestions may ask); else {} (each computed when needed)."""
    from lotus.analysis.overlap import at_once, cpus

    if not compact.is_table(batches) or cpus() < 2:
        return {}
    return at_once({"ws": lambda: wait_stats(batches), "util": lambda: worker_utilisation(batches),
                    "first": lambda: compactverdict.first_batch_wait_ns(batches),
                    "startup": lambda: _startup_wait_ns(batches), "spans": lambda: loop_spans(batches)})


def _startup_wait_ns(batches) -> float:
    """Wait for the first batch handed out in each (rank, loader, epoch): start-up, not steady state."""
    if compact.is_table(batches):
        return compactverdict.startup_wait_ns(batches)
    batches = ok_batches(batches)
    ok = (batches["wait_dur_ns"].notna() & batches["consumed_ns"].notna()).to_numpy(dtype=bool, na_value=False)
    b = batches[ok]
    if b.empty:
        return 0.0
    first = b.sort_values("consumed_ns").groupby(GROUP, sort=False).head(1)
    return float(first["wait_dur_ns"].sum())


def _first_batch_wait_ns(batches, spans) -> float:
    """Wait for the first batch of every epoch after the first (worker start-up of non-persistent workers)."""
    if spans.empty:
        return 0.0
    if compact.is_table(batches):
        return compactverdict.first_batch_wait_ns(batches)
    batches = ok_batches(batches)
    b = batches[(batches["wait_dur_ns"].notna() & (batches["epoch"] > batches["epoch"].min()))
                .to_numpy(dtype=bool, na_value=False)]
    if b.empty:
        return 0.0
    first = b.sort_values("consumed_ns").groupby(GROUP, sort=False).head(1)
    return float(first["wait_dur_ns"].sum())


def suggestions(v: dict, spans, batches, first_wait_ns: float | None = None) -> list[dict]:
    """Concrete changes, most useful first: ``{"id", "text"}``. ``first_wait_ns``: the first batches' waits of
    the epochs after the first, if already computed."""

    def restarts_ns() -> float:
        if first_wait_ns is None or spans.empty:
            return _first_batch_wait_ns(batches, spans)
        return first_wait_ns

    out: list[dict] = []
    s = v["settings"]
    cls = v["class"]
    busy = v["workers"]["mean_busy_share"]
    n_workers = s.get("num_workers")
    if n_workers is None:
        n_workers = len({k for k in v["workers"]["per_worker"] if not k.endswith("/main")}) or None
    slow = v["slowest_op"]
    if cls == UNKNOWN:
        out.append({"id": "trace_wait", "text": "The loop's wait is unknown for this run (no wait events): trace it "
                    "with lotus.dataloader.DataLoader to know whether the input pipeline holds the GPU back."})
    elif cls == FINE:
        out.append({"id": "fine", "text": f"The input pipeline keeps up (the loop waited {v['wait_share']:.1%} of "
                    "its time): speed up the model/GPU side; more workers will not help."})
        if busy is not None and busy < 0.5 and n_workers and n_workers > 1:
            fewer = max(1, math.ceil(n_workers * busy / 0.8))
            if fewer < n_workers:
                out.append({"id": "fewer_workers", "text": f"Workers are busy only {busy:.0%} of the time: "
                            f"num_workers={fewer} (now {n_workers}) would likely keep up and free CPU cores."})
        return out
    wait_ns = (v["wait_s"] or 0) * 1e9
    if v.get("steady_class") == FINE and v.get("steady_wait_share") is not None:
        start = v.get("startup_wait_s") or 0.0
        out.append({"id": "startup", "text": f"{start:.3g} s of the {wait_ns / 1e9:.3g} s of waiting is the first "
                    f"batch of each epoch (worker start-up, cold reads); in steady state the loop waits only "
                    f"{v['steady_wait_share']:.1%}: the pipeline keeps up once running, and longer runs amortise "
                    "the start."})
        restarts = restarts_ns()
        if restarts > 0 and s.get("persistent_workers") is not True:
            out.append({"id": "persistent_workers", "text": f"persistent_workers=True: restarting workers cost "
                        f"{restarts / 1e9:.3g} s of waiting at the start of later epochs."})
        if slow is not None and (slow.get("share_of_preprocessing") or 0) >= 0.25:
            hint = _OP_HINTS.get(slow["name"], "look for a cheaper implementation, or move it to the GPU")
            out.append({"id": "cheaper_op", "text": f"Make '{slow['name']}' cheaper: "
                        f"{slow['share_of_preprocessing']:.0%} of preprocessing time ({slow['mean_ms']:.3g} ms per "
                        f"call); {hint}."})
        return out
    in_process = n_workers == 0 or (n_workers is None and any(k.endswith("/main") for k in v["workers"]["per_worker"]))
    if cls in (INPUT_BOUND, SEVERE) and in_process:
        loop_ns = (v["loop_s"] or 0) * 1e9
        need = _workers_needed((busy or 0) * loop_ns, loop_ns, wait_ns)
        out.append({"id": "more_workers", "text": "Preprocessing runs in the training process (num_workers=0), so "
                    "the loop waits for every batch: " + (
                        f"use num_workers={need} or more so that it overlaps the steps." if need else
                        f"the loop's own work is only {_own_share(loop_ns, wait_ns):.1%} of its time, so no number "
                        "of workers hides preprocessing behind it: use as many as the CPUs allow.")})
    elif cls in (INPUT_BOUND, SEVERE):
        hol = v.get("head_of_line") or {}
        if busy is not None and busy >= 0.8 and n_workers:
            loop_ns = (v["loop_s"] or 0) * 1e9
            need = _workers_needed(n_workers * busy * loop_ns, loop_ns, wait_ns)
            cpus = s.get("cpus_available")
            if need is None:
                out.append({"id": "more_workers", "text": f"Workers are busy {busy:.0%} of the time and the loop's "
                            f"own work is only {_own_share(loop_ns, wait_ns):.1%} of its time, so no number of "
                            "workers hides preprocessing behind it: make preprocessing cheaper (below) or use as "
                            "many workers as the CPUs allow."})
            elif need > n_workers and cpus and need >= cpus:
                out.append({"id": "more_workers", "text": f"Workers are busy {busy:.0%} of the time and the loop "
                            f"would need about {need} of them, more than the {cpus} CPUs this job may use: make "
                            "preprocessing cheaper (below) or run on more CPUs; "
                            f"num_workers={max(n_workers, cpus - 1)} is the most this machine can use."})
            elif need > n_workers:
                out.append({"id": "more_workers", "text": f"Workers are busy {busy:.0%} of the time: use "
                            f"num_workers={need} (now {n_workers}), if the machine has the CPU cores for them."})
        if hol.get("in_order_false_saving_share", 0) >= 0.05 and s.get("in_order") is not False:
            out.append({"id": "in_order", "text": f"in_order=False: while the loop waited, later batches were often "
                        f"ready already; estimated saving {hol['in_order_false_saving_ms'] / 1e3:.3g} s "
                        f"({hol['in_order_false_saving_share']:.0%} of the wait)."})
        startup = restarts_ns()
        if wait_ns and startup / wait_ns >= 0.1 and s.get("persistent_workers") is not True:
            out.append({"id": "persistent_workers", "text": f"persistent_workers=True: restarting workers cost "
                        f"{startup / 1e9:.3g} s of waiting at the start of epochs ({startup / wait_ns:.0%} of "
                        "the wait)."})
        if busy is not None and busy < 0.8:
            pf = s.get("prefetch_factor")
            out.append({"id": "prefetch", "text": f"Workers are idle {1 - busy:.0%} of the time while the loop "
                        "waits: keep more batches in flight (prefetch_factor="
                        f"{(pf or 2) * 2}{'' if pf is None else f', now {pf}'}) or look for stalls between "
                        "batches (dispatch, result queue, pinning)."})
    if slow is not None and (slow.get("share_of_preprocessing") or 0) >= 0.25:
        hint = _OP_HINTS.get(slow["name"], "look for a cheaper implementation, or move it to the GPU")
        out.append({"id": "cheaper_op", "text": f"Make '{slow['name']}' cheaper: {slow['share_of_preprocessing']:.0%} "
                    f"of preprocessing time ({slow['mean_ms']:.3g} ms per call); {hint}."})
    return out
