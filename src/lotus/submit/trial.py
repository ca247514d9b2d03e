"""workers=auto side by side: the model's disjoint CPU sets against every app sharing every core, measured.

The model sizes each auto app's CPU set from the app's probe *alone*. Whether pinning apps to disjoint sets
pays when they run together depends on what no single-app model sees: apps sharing one GPU, memory bandwidth,
a main process starved among the other apps' workers, idle CPUs of one set that another app could use. So
before the apps run, both plans run side by side for a short trial (``PlanOptions.trial_s`` seconds each, a
time limit; traces under ``OUT/trials/<plan>/``):

(each app's time limit: its start-up, as long as its profiling probe took at most, + the warm-up + the trial)

* ``disjoint``: the model's plan (CPU sets from :func:`lotus.submit.allocator.allocate`);
* ``shared``: every auto app (and every fixed app pinned only to keep the sets disjoint) unpinned, with the
  workers it would have alone on the whole pool: what users do when nobody plans.

Each trial's figure is the apps' total samples/s while all of them ran: per app the one steady-state measure
(:func:`lotus.analysis.steady.steady_rate`) over the hand-offs inside the common window (from the latest
app's first hand-off + ``warmup_s`` to the earliest app's last hand-off), summed with its 95% interval
(:func:`lotus.analysis.runspread.combine`). The plan with the higher total runs (the text says whether the
difference is beyond the trials' noise); a trial without a rate means sharing: ``workers=auto`` never runs a
mix slower than letting every app use every core, within the trials' precision. The disjoint trial also
checks the model: each app's measured rate against the curve's prediction at its CPUs.

**A second allocation round** (``refine``, on by default): the curves come from each app's probe alone, so
side by side they can be wrong (four apps on one GPU: ResNet-152s predicted 1,024 samples/s at 4 CPUs
measured 643). The disjoint trial measured every auto app at its CPUs, with its loop's wait share over the
window; :func:`refined_curves` corrects each curve by it: an app whose loop hardly waited
(< :data:`STEP_BOUND_WAIT`) is held by its step side by side, so its curve is capped at the measured rate
(more CPUs cannot raise it; it needs only the CPUs at which its own curve reaches that rate); an app whose
loop waited is data-bound, its pipeline delivered ``measured / predicted`` of what the curve said, and its
curve is scaled by that. The allocator runs again on the corrected curves; when its sets differ from the
first round's, they run as a third trial (``refined``), and the highest measured total of the trials runs.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from lotus.launch.options import format_cpus

_log = logging.getLogger("lotus.submit")
WARMUP_S = 10.0  # seconds after the latest app's first hand-off not counted (cuDNN autotuning, the ramp)
MIN_WINDOW_S = 5.0  # a common window shorter than this: the trial cannot tell
STARTUP_S = 20.0  # an app's start-up (imports, model, first batches) when no probe timed it
MAX_STARTUP_S = 60.0
STEP_BOUND_WAIT = 0.10  # a loop that waited less than this share of the trial's window is held by its step


@dataclass
class TrialRate:
    """One trial plan's measured total while all apps ran."""

    plan: str
    samples_per_s: float | None
    ci95: tuple[float, float] | None
    window_s: float
    apps: dict[str, dict] = field(default_factory=dict)  # per app: samples_per_s, ci95, cpus, workers
    error: str | None = None

    def to_dict(self) -> dict:
        return {"plan": self.plan, "samples_per_s": self.samples_per_s,
                "ci95": list(self.ci95) if self.ci95 else None, "window_s": self.window_s, "apps": self.apps,
                "error": self.error}


def _handoffs(trace_dir: str):
    """Sorted hand-off times (ns), samples and the loop's wait for each (ns, over the run's ranks: a wait of
    every rank at once counts once) of every loader of the run at ``trace_dir``."""
    import numpy as np

    from lotus.query import consumed_only, load_batches

    b = consumed_only(load_batches(trace_dir))
    if b.empty:
        raise ValueError("no batch was consumed")
    t = b["consumed_ns"].to_numpy(dtype="int64")
    n = b["n_samples"].to_numpy(dtype="float64")
    w = b["wait_dur_ns"].to_numpy(dtype="float64", na_value=0.0) if "wait_dur_ns" in b else np.zeros(len(t))
    ranks = max(int(b["rank"].nunique()), 1) if "rank" in b else 1
    order = np.argsort(t, kind="stable")
    return t[order], n[order], np.nan_to_num(w[order]) / ranks


def window_rates(trace_dirs: dict[str, str], warmup_s: float = WARMUP_S, plan: str = "",
                 workers: dict[str, int] | None = None) -> TrialRate:
    """Total samples/s of the apps traced in ``trace_dirs`` (name -> trace directory) while all of them ran,
    with its 95% interval; ``error`` says why there is none (an app without a trace, no common window).
    ``workers``: each app's workers (per rank): the interval's blocks are whole rounds of them."""
    from lotus.analysis.runspread import combine
    from lotus.analysis.steady import steady_rate

    data = {}
    for name, d in trace_dirs.items():
        try:
            data[name] = _handoffs(d)
        except Exception as exc:  # an app that failed or wrote no trace: no common window
            return TrialRate(plan, None, None, 0.0, error=f"{name}: {exc}")
    t0 = max(int(t[0]) for t, _, _ in data.values()) + int(warmup_s * 1e9)
    t1 = min(int(t[-1]) for t, _, _ in data.values())
    if t1 - t0 < MIN_WINDOW_S * 1e9:
        return TrialRate(plan, None, None, max(t1 - t0, 0) / 1e9,
                         error=f"the apps ran together for under {MIN_WINDOW_S:g} s after {warmup_s:g} s of warm-up")
    rates, apps = [], {}
    for name, (t, n, w) in data.items():
        # the last hand-off at or before t0 opens the window (ramp 1): its samples are not counted
        lo = max(int((t <= t0).sum()) - 1, 0)
        hi = int((t <= t1).sum())
        r = steady_rate(t[lo:hi], n[lo:hi], ramp=1, workers=(workers or {}).get(name) or 0)
        rates.append(r)
        span = float(t[hi - 1] - t[lo]) if hi - 1 > lo else 0.0
        apps[name] = {"samples_per_s": r.samples_per_s, "ci95": list(r.ci95) if r.ci95 else None,
                      "wait_share": min(float(w[lo + 1:hi].sum()) / span, 1.0) if span > 0 else None}
    total, ci = combine(rates)
    return TrialRate(plan, total, ci, (t1 - t0) / 1e9, apps=apps)


def better(disjoint: TrialRate, shared: TrialRate) -> tuple[bool, str]:
    """Whether to keep the disjoint plan (its measured total above sharing's), and why in words: whether the
    difference is beyond the trials' noise (its 95% interval clear of 0) or within it (then the higher of
    two equally likely totals: the expected throughput is higher, and the loss, if any, is within noise)."""
    if disjoint.samples_per_s is None or shared.samples_per_s is None:
        return False, "a trial gave no rate (" + "; ".join(e for e in (disjoint.error, shared.error) if e) + \
            "): the apps share"
    d = disjoint.samples_per_s - shared.samples_per_s
    ratio = disjoint.samples_per_s / shared.samples_per_s if shared.samples_per_s else math.inf
    keep = d > 0
    if disjoint.ci95 is None or shared.ci95 is None:
        how = "no interval"
    else:
        h = math.hypot(*((r.ci95[1] - r.ci95[0]) / 2 for r in (disjoint, shared)))
        how = f"95% +-{h:,.0f}: " + ("beyond the trials' noise" if abs(d) > h else "within the trials' noise")
    words = f"disjoint/shared {ratio:.3f}x (difference {d:+,.0f} samples/s, {how})"
    return keep, words + (": disjoint CPU sets pay" if keep else ": the apps share")


def shared_plan(plan):
    """``plan`` with every auto app (and every fixed app pinned only to keep the sets disjoint) unpinned,
    each auto app with the workers it would have alone on the whole pool."""
    from lotus.submit.curves import workers_for
    from lotus.submit.plan import rebuild_command

    apps = []
    for p in plan.apps:
        if p.app.workers_auto and p.app.cpus is None:
            w = workers_for(len(plan.pool), p.ranks)
            p = replace(p, cpus=None, workers=w, cpus_source="shared", command=rebuild_command(p, plan.options, w))
        elif p.cpus_source == "workers + 1":
            p = replace(p, cpus=None, cpus_source="-")
        apps.append(p)
    return replace(plan, apps=apps, notes=list(plan.notes))


def startup_s(probes: list[dict] | None) -> float:
    """Seconds to allow for the apps' start-up: the longest profiling probe's wall time (start-up + its short
    measurement: an upper bound), at most :data:`MAX_STARTUP_S`; :data:`STARTUP_S` without a probe."""
    walls = [float(p["wall_s"]) for p in probes or () if p.get("wall_s") and p.get("exit_code") == 0]
    return min(max(walls), MAX_STARTUP_S) if walls else STARTUP_S


def _trial_specs(plan, label: str, limit_s: float) -> list:
    out = []
    for p in plan.apps:
        d = Path(plan.out_dir) / "trials" / label / p.name
        s = p.spec()
        t = limit_s if s.timeout_s is None else min(limit_s, s.timeout_s)
        out.append(replace(s, trace_dir=str(d), timeout_s=t, kind="trial"))
    return out


def predicted(curves: dict, plan) -> dict[str, float]:
    """The model's rate of each auto app at its planned CPUs (the disjoint plan)."""
    out = {}
    for p in plan.apps:
        if p.name in curves and p.cpus:
            try:
                out[p.name] = float(curves[p.name](len(p.cpus)))
            except Exception:  # a curve that fails is no check
                continue
    return out


def _capped(curve, cap: float):
    return lambda n: min(curve(n), cap)


def _scaled(curve, factor: float):
    return lambda n: curve(n) * factor


def refined_curves(curves: dict, plan, disjoint: TrialRate) -> tuple[dict, list[str]]:
    """The auto apps' curves corrected by the disjoint trial (see the module doc) and a note per corrected app.
    An app without a measured rate and a prediction at its CPUs keeps its curve."""
    out, notes = dict(curves), []
    for p in plan.apps:
        a = disjoint.apps.get(p.name) or {}
        c, meas, pred = curves.get(p.name), a.get("samples_per_s"), a.get("predicted_samples_per_s")
        if c is None or not meas or not pred or not p.cpus:
            continue
        ws = a.get("wait_share")
        if ws is not None and ws < STEP_BOUND_WAIT:
            out[p.name] = _capped(c, meas)
            notes.append(f"{p.name}: its loop waited {ws:.0%} side by side, held by its step at {meas:,.0f} samples/s "
                         f"on {len(p.cpus)} CPUs (its curve alone: {pred:,.0f}): capped there")
        else:
            out[p.name] = _scaled(c, meas / pred)
            notes.append(f"{p.name}: its pipeline gave {meas:,.0f} samples/s side by side on {len(p.cpus)} CPUs "
                         f"(its curve alone: {pred:,.0f}"
                         + (f"; its loop waited {ws:.0%}" if ws is not None else "") + f"): curve x {meas / pred:.2f}")
    return out, notes


def _auto_sizes(plan) -> dict[str, int]:
    return {p.name: len(p.cpus) for p in plan.apps if p.app.workers_auto and p.app.cpus is None and p.cpus}


def refined_plan(plan, curves: dict, disjoint: TrialRate):
    """The plan of the second allocation round (the same apps and options, the corrected curves) and its
    notes; None when its auto apps' CPU counts are the first round's (nothing new to try)."""
    from lotus.submit.plan import build_plan

    fixed, notes = refined_curves(curves, plan, disjoint)
    if not notes:
        return None, notes
    cand = build_plan([p.app for p in plan.apps], plan.options, fixed)
    if _auto_sizes(cand) == _auto_sizes(plan):
        return None, notes
    for p in cand.apps:
        if p.cpus_source == "model":
            p.cpus_source = "model, refined by the trial"
    return cand, notes


def choose(res: dict[str, TrialRate]) -> tuple[str, str]:
    """The trial whose plan runs (the highest measured total; ``shared`` when sharing or the chosen plan gave no
    rate) and why, in words (:func:`better` against sharing; a refined trial against the first disjoint one)."""
    shared = res["shared"]
    label = max((k for k in res if k != "shared" and res[k].samples_per_s is not None),
                key=lambda k: res[k].samples_per_s, default="disjoint")
    keep, why = better(res[label], shared)
    if "refined" in res:
        r, d = res["refined"], res["disjoint"]
        if r.samples_per_s is not None and d.samples_per_s is not None:
            why = f"refined/disjoint {r.samples_per_s / d.samples_per_s:.3f}x; " + why
        elif r.error:
            why = f"the refined trial gave no rate ({r.error}); " + why
    if keep and label != "disjoint":
        why = why.replace("disjoint/shared", f"{label}/shared").replace("disjoint CPU sets pay",
                                                                          f"the {label} CPU sets pay")
    return (label if keep else "shared"), why


def run_trials(plan, executor, trial_s: float, curves: dict | None = None, warmup_s: float | None = None,
               start_s: float = STARTUP_S, refine: bool = True):
    """Run the disjoint ``plan`` and its shared twin side by side, each measured over about ``trial_s`` seconds
    (every app's time limit: ``start_s`` of start-up + ``warmup_s`` + ``trial_s``); with ``refine``, the second
    allocation round's plan too when it differs (the module doc); the plan to run (one of them) and the trials'
    record (for submit.json and the text). ``warmup_s`` default: :data:`WARMUP_S`, at most a quarter of the
    trial."""
    if warmup_s is None:
        warmup_s = min(WARMUP_S, trial_s / 4)
    cands = {"disjoint": plan, "shared": shared_plan(plan)}
    res = {}

    def trial(label: str) -> None:
        cand = cands[label]
        specs = _trial_specs(cand, label, start_s + warmup_s + trial_s)
        _log.info("workers=auto: %s trial, %d app(s), %.0f s", label, len(specs), trial_s)
        executor.run(specs, concurrent=True, delays_s=[p.delay_s for p in cand.apps])
        r = window_rates({s.name: s.trace_dir for s in specs}, warmup_s, plan=label,
                         workers={p.name: p.workers or 0 for p in cand.apps})
        for p in cand.apps:
            if p.name in r.apps:
                r.apps[p.name].update(cpus=format_cpus(p.cpus) if p.cpus else None, workers=p.workers)
        # the refined plan is checked against its corrected curves, the disjoint one against the probes' curves
        pred = {} if label == "shared" else predicted(cand.curves if label == "refined" else curves or {}, cand)
        for name, v in pred.items():
            a = r.apps.get(name)
            if a is not None:
                a["predicted_samples_per_s"] = v
                if a.get("samples_per_s"):
                    a["model_error"] = v / a["samples_per_s"] - 1
        res[label] = r

    trial("disjoint")
    trial("shared")
    refine_notes: list[str] = []
    if refine and curves:
        cand, refine_notes = refined_plan(plan, curves, res["disjoint"])
        if cand is not None:
            cands["refined"] = cand
            trial("refined")
    label, why = choose(res)
    chosen = cands[label]
    chosen.notes.append(f"workers=auto trial ({trial_s:g} s each): {why}")
    record = {"seconds": trial_s, "warmup_s": warmup_s, "startup_s": start_s, "chosen": label, "why": why,
              **{k: v.to_dict() for k, v in res.items()}, "refine_notes": refine_notes}
    return chosen, record


def trial_lines(trial: dict | None) -> list[str]:
    """The trials as text: each plan's total with its interval, per app, and the choice."""
    from lotus.submit.results import rate_text as rate

    if not trial:
        return []
    out = [f"workers=auto trials ({trial['seconds']:g} s each, the apps side by side):"]
    for label in ("disjoint", "shared", "refined"):
        r = trial.get(label)
        if r is None:
            if label == "refined" and trial.get("refine_notes"):
                out.append("  refined: the corrected curves give the first round's CPU counts (no third trial)")
            continue
        head = f"  {label}: " + (f"no rate: {r['error']}" if r.get("error") else
                                 f"{rate(r['samples_per_s'], r['ci95'])} samples/s over {r['window_s']:.1f} s")
        out.append(head)
        for name, a in (r.get("apps") or {}).items():
            pred = a.get("predicted_samples_per_s")
            extra = "" if pred is None else f"; model {pred:,.1f} ({a['model_error']:+.1%})" \
                if a.get("model_error") is not None else f"; model {pred:,.1f}"
            where = f"CPUs {a['cpus']}" if a.get("cpus") else "not pinned"
            waited = f"; loop waited {a['wait_share']:.0%}" if a.get("wait_share") is not None else ""
            out.append(f"    {name}: {rate(a.get('samples_per_s'), a.get('ci95'))}; {where}; "
                       f"{a.get('workers')} worker(s){waited}{extra}")
        if label == "disjoint" and trial.get("refine_notes"):
            out += ["  second allocation round, the curves corrected by this trial:",
                    *(f"    {n}" for n in trial["refine_notes"])]
    out.append(f"  chosen: {trial['chosen']} ({trial['why']})")
    return [*out, ""]
