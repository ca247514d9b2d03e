"""Ranks in lockstep: at each training step, which rank the others waited for, and why.

A data-parallel job (DDP) ends the compute of every step with a collective (the gradient all-reduce):
no rank leaves it before the last one has reached it. A rank that starts a step late therefore makes
every other rank wait at the end of that step. Per step of the main loader, with the ranks aligned by
(epoch, batch id) (torch numbers the batches of every epoch 0, 1, 2... on every rank):

* **hand-off**: ``consumed_ns``, when the rank's loop got the batch and started the step;
* **late**: the latest hand-off minus the median of the ranks' hand-offs: what the collective pays for
  the slowest rank at that step (how long a typical rank blocks in it); **spread**: latest - earliest;
* **the slowest rank** of the step (the latest hand-off; ties: the lowest rank; none where it is late by
  less than :data:`HELD_MIN` of the median time between hand-offs or :data:`HELD_MIN_NS`: noise) and
  the **cause** of its
  lateness: its wait for the batch beyond the ranks' median wait (``input pipeline``: its DataLoader
  had not the batch ready) against its request for the batch later than the ranks' median request
  (``step``: its previous step ended later, work after the collective such as logging or
  checkpointing on one rank); the larger of the two.

**Lockstep** is checked, not assumed: with a collective in every step no rank can ask for batch k+1
before every rank has had batch k (``min request(k+1) >= max hand-off(k)``, within :data:`TOLERANCE_NS`
for clocks of different hosts). Where that holds for fewer than :data:`LOCKSTEP_SHARE` of the steps
(no per-step collective, gradient accumulation, independent ranks) ``lockstep`` is False and the
per-step blame means nothing; :mod:`lotus.analysis.ranks` then compares the ranks' rates instead.

What host timings cannot see: a rank slower *before* the collective (its forward and backward) makes
every rank's step equally long (the others block inside the step), so the hand-offs stay together and
no rank is late; the GPU side (HTA, Nsight) sees that. Hand-offs of different hosts are compared on
their wall clocks (NTP keeps them typically well under a millisecond apart); the input-pipeline part of
a lateness is a difference of durations and needs no agreement of clocks.
"""

from __future__ import annotations

import numpy as np

INPUT, STEP = "input pipeline", "step"
STEP_COLUMNS = ["epoch", "batch_id", "ranks", "slowest_rank", "late_ns", "spread_ns", "input_ns", "step_ns", "cause",
                "startup"]
TOLERANCE_NS = 1_000_000  # clocks of different hosts may disagree this much (lockstep check)
LOCKSTEP_SHARE = 0.9  # share of consecutive steps that must satisfy the lockstep condition
STRAGGLER_SHARE = 0.02  # a rank holding the others back at least this share of the loop's time is named...
STRAGGLER_LEAD = 2.0  # ... if it held them at least this many times longer than any other rank did
HELD_MIN = 0.02  # a step's slowest rank holds the others if late by this share of the median step or more
HELD_MIN_NS = 50_000  # ... and by at least this much
WORST_STEPS = 5


def step_table(batches, loaders: dict[int, int]):
    """One row per step of the ranks' main loaders (``loaders``: rank -> its main loader) that at least two
    ranks handed out (columns :data:`STEP_COLUMNS`; ns as float64, exact integers or halves), sorted by
    (epoch, batch id), and whether the ranks ran in lockstep (module doc)."""
    return step_table_of([step_rows(batches, loaders)], loaders)


_STEP_ROW_COLUMNS = ("rank", "epoch", "batch_id", "consumed_ns", "wait_dur_ns", "wait_start_ns")


def step_rows(batches, loaders: dict[int, int]) -> dict[str, np.ndarray]:
    """What :func:`step_table_of` reads of ``batches`` (all of a run's rows, or some ranks' rows of it):
    the key and times of the ok batches of each rank's main loader handed to the loop, in the rows' order
    (int64 values; held as int32 where every value fits)."""
    from lotus.query import failed_mask

    # the rows of ok_batches(batches) that step_table keeps, as a mask: only these columns of them are copied
    b = batches
    main = b["rank"].map(loaders).astype("Int64")
    sel = (b["loader"] == main) & b["consumed_ns"].notna() & b["wait_dur_ns"].notna() & b["wait_start_ns"].notna()
    sel = sel.to_numpy(dtype=bool, na_value=False) & ~failed_mask(b)
    del main
    out = {}
    for c in _STEP_ROW_COLUMNS:
        v = b[c][sel].to_numpy(np.int64)
        fits = len(v) and int(v.min()) >= np.iinfo(np.int32).min and int(v.max()) <= np.iinfo(np.int32).max
        out[c] = v.astype(np.int32) if fits else v
    return out


STEP_CHUNK_ROWS = 1 << 20  # about this many step rows (of all ranks) read at once: a range of steps at a time


def step_table_of(parts: list[dict[str, np.ndarray]], loaders: dict[int, int]):
    """:func:`step_table` of the rows of ``parts`` (:func:`step_rows` of a run's ranks, in the rows' order; each
    rank's rows in one part), which it empties as it reads them; ``loaders``: every rank's main loader.

    Made a range of steps at a time: each part's rows sorted by step (stable: a step a rank handed out twice keeps
    its last row, as a grid of the whole would) and kept in spilled arrays (:mod:`lotus.query.spill`), then the
    rows of every rank for about :data:`STEP_CHUNK_ROWS` rows' worth of steps reduced to one row a step; what needs
    every step (the median gap between steps, the lockstep check across neighbouring steps) reads those per-step
    rows. The resident memory is a range's rows and the per-step figures, not every rank's step rows (~50 bytes a
    batch: ~21 GB for 430M batches); the same table, value for value, at any range size."""
    import pandas as pd

    from lotus.query import spill

    empty = pd.DataFrame(columns=STEP_COLUMNS), False
    parts[:] = [p for p in parts if len(p["rank"])]
    ranks = (np.unique(np.concatenate([np.unique(p["rank"]) for p in parts])).astype(np.int64) if parts
             else np.zeros(0, np.int64))
    if len(loaders) < 2 or len(ranks) < 2:
        parts.clear()
        return empty
    width = max(int(p["batch_id"].max()) for p in parts) + 1
    e0 = min(int(p["epoch"].min()) for p in parts)
    base = min(int(p["wait_start_ns"].min()) for p in parts)
    by_step = []  # each part's rows sorted by step, spilled
    while parts:
        p = parts.pop(0)
        key = (p.pop("epoch").astype(np.int64) - e0) * width + p.pop("batch_id")
        order = np.argsort(key, kind="stable")
        rows = {"key": key[order], "ri": np.searchsorted(ranks, p.pop("rank")[order]).astype(np.int32)}
        del key
        rows.update((c, p.pop(c)[order]) for c in ("wait_start_ns", "consumed_ns", "wait_dur_ns"))
        by_step.append(spill.copies_of(rows))
        del p, order, rows
        spill.trim()
    span = max(1, STEP_CHUNK_ROWS // len(ranks))  # steps a range: a step has a row of each rank at most (once)
    last = max(int(r["key"][-1]) for r in by_step)
    got: dict[str, list] = {}
    for lo in range(int(min(int(r["key"][0]) for r in by_step)), last + 1, span):
        cut = [(r, *np.searchsorted(r["key"], [lo, lo + span])) for r in by_step]
        one = {c: np.concatenate([r[c][a:b] for r, a, b in cut]) for c in
               ("key", "ri", "wait_start_ns", "consumed_ns", "wait_dur_ns")}
        spill.trim()
        if len(one["key"]):
            for c, v in _step_figures(one, len(ranks), base).items():
                got.setdefault(c, []).append(v)
        del one, cut
    del by_step
    cols = ("key", "n", "h", "med", "late", "inp", "stp", "spread", "ask_min", "hand_max")
    f = {c: np.concatenate(got[c]) if got.get(c) else np.zeros(0, np.float64) for c in cols}
    keys, n, h = f["key"].astype(np.int64), f["n"].astype(np.int64), f["h"].astype(np.int64)
    med, late, inp, stp = f["med"], f["late"], f["inp"], f["stp"]
    same_epoch = (keys[1:] // width == keys[:-1] // width) & (np.diff(keys) == 1)
    gaps = (med[1:] - med[:-1])[same_epoch]
    held = late >= max(HELD_MIN * float(np.median(gaps)) if len(gaps) else 0.0, HELD_MIN_NS)
    out = pd.DataFrame({
        "epoch": keys // width + e0, "batch_id": keys % width, "ranks": n,
        "slowest_rank": np.where(held, ranks[h], -1), "late_ns": np.where(held, late, 0.0),
        "spread_ns": f["spread"], "input_ns": np.where(held, inp, 0.0), "step_ns": np.where(held, stp, 0.0),
        "cause": pd.Categorical(np.where(~held, None, np.where(inp >= stp, INPUT, STEP)), categories=[INPUT, STEP]),
        "startup": np.concatenate([[True], ~same_epoch]) if len(keys) else np.zeros(0, bool),
    })
    ok = f["ask_min"][1:] >= f["hand_max"][:-1] - TOLERANCE_NS
    pairs = int(same_epoch.sum())
    lockstep = pairs > 0 and float((ok & same_epoch).sum()) / pairs >= LOCKSTEP_SHARE
    return out, lockstep


def _step_figures(rows: dict[str, np.ndarray], n_ranks: int, base: int) -> dict[str, np.ndarray]:
    """Per step of ``rows`` (every rank's rows of a range of steps, in the parts' order) that two ranks or more
    handed out: its key, ranks, the latest rank's index (``h``), the median hand-off, how late the latest was
    and its input and step parts, the spread, the earliest request and the latest hand-off (ns from ``base``)."""
    keys, si = np.unique(rows["key"], return_inverse=True)

    def grid(v, off: int = 0):
        m = np.full((len(keys), n_ranks), np.nan)
        m[si, rows["ri"]] = (v.astype(np.int64) - off).astype(np.float64)  # differences of < 2**53 ns: exact
        return m

    ask, hand, wait = grid(rows["wait_start_ns"], base), grid(rows["consumed_ns"], base), grid(rows["wait_dur_ns"])
    n = (~np.isnan(hand)).sum(axis=1)
    keep = n >= 2
    if not keep.all():
        hand, wait, ask, keys, n = hand[keep], wait[keep], ask[keep], keys[keep], n[keep]
    if not len(keys):
        return {}
    rows_ = np.arange(len(keys))
    h = np.nanargmax(hand, axis=1)
    med = np.nanmedian(hand, axis=1)
    return {"key": keys, "n": n, "h": h, "med": med, "late": hand[rows_, h] - med,
            "inp": np.maximum(wait[rows_, h] - np.nanmedian(wait, axis=1), 0.0),
            "stp": np.maximum(ask[rows_, h] - np.nanmedian(ask, axis=1), 0.0),
            "spread": np.nanmax(hand, axis=1) - np.nanmin(hand, axis=1),
            "ask_min": np.nanmin(ask, axis=1), "hand_max": np.nanmax(hand, axis=1)}


def blame(steps, key_of: dict[int, object] | None = None) -> dict:
    """Per rank (or per ``key_of[rank]``, a node): steps it was the slowest of, their share, and the time
    the others waited for it (s), by cause; the steps that start an epoch (worker start-up, as the verdict's
    steady state) left out."""
    steps = steps[~steps["startup"].to_numpy(bool)]
    held = steps[steps["slowest_rank"] >= 0]
    who = held["slowest_rank"].to_numpy()
    if key_of is not None:
        who = np.array([key_of.get(int(r)) for r in who], dtype=object)
    late, cause = held["late_ns"].to_numpy(), held["cause"].astype(str).to_numpy()
    out: dict = {}
    for k in sorted(set(who.tolist()), key=str):
        m = who == k
        out[k] = {"slowest_steps": int(m.sum()), "slowest_share": float(m.sum()) / len(steps),
                  "held_s": float(late[m].sum()) / 1e9, "held_input_s": float(late[m & (cause == INPUT)].sum()) / 1e9,
                  "held_step_s": float(late[m & (cause == STEP)].sum()) / 1e9}
    return out


def summary(steps, lockstep: bool, loop_ns: float | None, nodes: dict[int, str]) -> dict:
    """What the collective paid over the run and who made it pay: ``steps``, ``lockstep``, ``cost_s`` (sum
    of the held steps' lateness), ``cost_share`` (of the median rank's loop time), the spread (ms: median, p90,
    max), ``per_rank`` and ``per_node`` (:func:`blame`), the ``straggler`` (the rank the others waited for
    longest, when that is at least :data:`STRAGGLER_SHARE` of the loop; else None) and the worst steps."""
    if not len(steps):
        return {"steps": 0, "lockstep": False, "straggler": None, "per_rank": {}, "per_node": {}}
    spread = steps["spread_ns"].to_numpy() / 1e6
    out = {"steps": len(steps), "lockstep": lockstep,
           "spread_ms": {"median": float(np.median(spread)), "p90": float(np.percentile(spread, 90)),
                         "max": float(spread.max())}, "straggler": None, "per_rank": {}, "per_node": {}}
    if not lockstep:  # no collective every step: nobody waits for the latest hand-off at each step
        out["note"] = ("the ranks are not in lockstep (a rank asked for batch k+1 before another had batch k): "
                       "no collective in every step, so no per-step blame")
        return out
    cost = float(steps["late_ns"].to_numpy()[~steps["startup"].to_numpy(bool)].sum())
    per_rank = blame(steps)
    out.update(cost_s=cost / 1e9, cost_share=cost / loop_ns if loop_ns else None, per_rank=per_rank,
               per_node=blame(steps, nodes))
    if per_rank and loop_ns:
        r = max(per_rank, key=lambda k: (per_rank[k]["held_s"], -k))
        d = per_rank[r]
        runner_up = max((v["held_s"] for k, v in per_rank.items() if k != r), default=0.0)
        if d["held_s"] * 1e9 >= STRAGGLER_SHARE * loop_ns and d["held_s"] >= STRAGGLER_LEAD * runner_up:
            out["straggler"] = {"rank": int(r), "node": nodes.get(int(r)), "basis": "steps",
                                "cause": INPUT if d["held_input_s"] >= d["held_step_s"] else STEP,
                                "held_share_of_loop": d["held_s"] * 1e9 / loop_ns, **d}
    worst = steps[~steps["startup"].to_numpy(bool)].nlargest(WORST_STEPS, "late_ns", keep="first")
    out["worst_steps"] = [{"epoch": int(s.epoch), "batch_id": int(s.batch_id), "rank": int(s.slowest_rank),
                           "late_ms": s.late_ns / 1e6, "input_ms": s.input_ns / 1e6, "step_ms": s.step_ns / 1e6,
                           "cause": None if s.slowest_rank < 0 else str(s.cause)}
                          for s in worst.itertuples() if s.late_ns > 0]
    return out


__all__ = ["INPUT", "STEP", "STEP_CHUNK_ROWS", "STEP_COLUMNS", "blame", "step_rows", "step_table", "step_table_of",
           "summary"]
