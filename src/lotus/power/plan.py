"""``lotus power plan``: the configuration with the highest predicted throughput under a power cap.

Configurations: tenants (processes sharing the GPU), batch size per tenant, MPS share per tenant (or
time slices), SM clock. Two searches over a fitted :class:`lotus.model.power.PowerModel`:

* time-sliced, equal tenants: exact search over tenants x batch x clock (the grid is small);
* MPS: frequency-aware greedy partitioning: for each clock, start from nothing and repeatedly take the
  move (add a tenant with one share quantum, give a tenant one more quantum, change a tenant's batch)
  with the best predicted throughput gained per watt, while the power stays under the cap and the
  shares sum to at most 100 %; equal-share MPS configurations are searched exactly as well.

The plan lists the commands a privileged user would run to apply it; lotus runs none of them and
never changes clocks, power limits, compute mode or MPS.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from lotus.model.power import PowerModel, TenantLoad


@dataclass(frozen=True)
class Config:
    sharing: str  # "time-sliced" | "mps"
    clock_mhz: float | None  # None: the clocks the GPU chooses (nothing locked)
    loads: tuple[TenantLoad, ...]
    samples_per_s: float
    power_w: float

    @property
    def energy_j_per_sample(self) -> float:
        return self.power_w / self.samples_per_s if self.samples_per_s > 0 else math.nan


@dataclass
class Plan:
    model: str
    power_cap_w: float
    feasible: bool
    best: Config  # the best under the cap, or the lowest-power configuration when none fits
    predicted_clock_mhz: float
    measured: dict | None = None  # the nearest measured point of the table (idle from data, energy)
    notes: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    searched: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rate_note"] = ("no interval: best is the power model's prediction, measured the bench table's nearest "
                          "row (one measurement per point)")
        d["best"]["energy_j_per_sample"] = self.best.energy_j_per_sample
        d["best"]["tenants"] = [{"batch": ld.batch, "share_pct": round(ld.share * 100, 3)} for ld in self.best.loads]
        del d["best"]["loads"]
        return d


def _evaluate(pm: PowerModel, sharing: str, clock, loads) -> Config:
    # default clocks (None): the clock the GPU chose at the nearest measured point
    f = pm.default_clock_mhz(loads[0].batch, len(loads)) if clock is None else clock
    pr = pm.predict_mix(loads, f, mps=sharing == "mps")
    return Config(sharing, clock, tuple(loads), float(pr.samples_per_s), float(pr.power_w))


def batch_candidates(pm: PowerModel) -> list[int]:
    """The measured batch sizes and the powers of two between them (never beyond the largest)."""
    lo, hi = min(pm.batches), max(pm.batches)
    pw = {2**k for k in range(0, 20) if lo <= 2**k <= hi}
    return sorted(pw | set(pm.batches))


def clock_candidates(pm: PowerModel, supported: Sequence[float] | None = None) -> list[float | None]:
    """None (default clocks) plus supported clocks from half the lowest measured clock to just above
    the highest; without a supported list, a grid over the measured range when the fit saw several clocks."""
    lo, hi = pm.clock_range_mhz
    if supported:
        clocks = sorted({float(c) for c in supported if 0.5 * lo <= c <= 1.05 * hi})
    elif pm.clock_fitted:
        clocks = sorted({round(c / 15) * 15.0 for c in [lo + (hi - lo) * i / 16 for i in range(17)]})
    else:
        clocks = []
    return [None, *clocks]


def search_time_sliced(pm: PowerModel, cap_w: float, clocks, batches, max_tenants: int) -> tuple[Config | None, Config]:
    """Exact: (best under the cap or None, lowest power)."""
    best = low = None
    for n, b, f in itertools.product(range(1, max_tenants + 1), batches, clocks):
        c = _evaluate(pm, "time-sliced", f, [TenantLoad(b, 1.0 / n)] * n)
        if low is None or c.power_w < low.power_w:
            low = c
        if c.power_w <= cap_w and (best is None or c.samples_per_s > best.samples_per_s):
            best = c
    return best, low


def greedy_mps(pm: PowerModel, cap_w: float, clock: float | None, batches, max_tenants: int,
               quantum_pct: int = 10) -> Config | None:
    """Greedy partitioning at one clock (see module doc)."""
    q = quantum_pct / 100
    cur: list[TenantLoad] = []
    cur_x, cur_p = 0.0, pm.power.idle_w if pm.power else 0.0
    best = None
    while True:
        moves = []
        used = sum(ld.share for ld in cur)
        if len(cur) < max_tenants and used + q <= 1 + 1e-9:
            moves += [[*cur, TenantLoad(b, q)] for b in batches]
        for i, ld in enumerate(cur):
            for b in batches:
                if used + q <= 1 + 1e-9:
                    moves.append([*cur[:i], TenantLoad(b, ld.share + q), *cur[i + 1:]])
                if b != ld.batch:
                    moves.append([*cur[:i], TenantLoad(b, ld.share), *cur[i + 1:]])
        pick, pick_score = None, -math.inf
        for m in moves:
            c = _evaluate(pm, "mps", clock, m)
            dx, dp = c.samples_per_s - cur_x, c.power_w - cur_p
            if c.power_w > cap_w or dx <= 1e-9:
                continue
            score = math.inf if dp <= 0 else dx / dp
            if score > pick_score or (score == pick_score and c.samples_per_s > pick.samples_per_s):
                pick, pick_score = c, score
        if pick is None:
            return best
        cur, cur_x, cur_p = list(pick.loads), pick.samples_per_s, pick.power_w
        if best is None or pick.samples_per_s > best.samples_per_s:
            best = pick


def search_mps(pm: PowerModel, cap_w: float, clocks, batches, max_tenants: int, quantum_pct: int = 10):
    """(best under the cap or None, lowest power): greedy partitioning and equal shares at each clock of
    a coarse grid (about 12), then at every clock around the two best coarse ones."""
    found: dict = {}

    def at(i: int):
        if i not in found:
            f = clocks[i]
            cands = [greedy_mps(pm, cap_w, f, batches, max_tenants, quantum_pct)]
            cands += [_evaluate(pm, "mps", f, [TenantLoad(b, 1.0 / n)] * n)
                      for n, b in itertools.product(range(1, max_tenants + 1), batches)]
            ok = [c for c in cands if c is not None and c.power_w <= cap_w]
            found[i] = (max(ok, key=lambda c: c.samples_per_s) if ok else None,
                        min((c for c in cands if c is not None), key=lambda c: c.power_w))
        return found[i]

    step = max(1, len(clocks) // 12)
    coarse = sorted(set(range(0, len(clocks), step)) | {len(clocks) - 1})
    ranked = sorted(coarse, key=lambda i: at(i)[0].samples_per_s if at(i)[0] else -1.0, reverse=True)
    for i in ranked[:2]:
        for k in range(max(0, i - step + 1), min(len(clocks), i + step)):
            at(k)
    bests = [b for b, _ in found.values() if b is not None]
    return (max(bests, key=lambda c: c.samples_per_s) if bests else None,
            min((lo for _, lo in found.values()), key=lambda c: c.power_w))


def make_plan(pm: PowerModel, power_cap_w: float, *, supported_clocks: Sequence[float] | None = None,
              max_tenants: int | None = None, sharing: Sequence[str] = ("time-sliced", "mps"), table=None,
              quantum_pct: int = 10, gpu_index: int = 0, power_limit_range_w: tuple[float, float] | None = None,
              tenant_command: str = "<your inference command, batch size {batch}>",
              mps_model: PowerModel | None = None) -> Plan:
    """The best configuration under ``power_cap_w`` (or, when none fits, the lowest-power one).
    ``mps_model``: a fit of MPS measurements for the MPS search (default: ``pm``)."""
    mps_pm = mps_model if mps_model is not None and mps_model.power is not None else pm
    if pm.power is None:
        raise ValueError(f"the table has no power measurements for {pm.model}: a plan under a cap needs power_w")
    clocks = clock_candidates(pm, supported_clocks)
    batches = batch_candidates(pm)
    n_max = max_tenants or max(pm.tenants)
    results = []
    if "time-sliced" in sharing:
        results.append(search_time_sliced(pm, power_cap_w, clocks, batches, n_max))
    if "mps" in sharing:
        results.append(search_mps(mps_pm, power_cap_w, clock_candidates(mps_pm, supported_clocks),
                                  batch_candidates(mps_pm), n_max, quantum_pct))
    bests = [b for b, _ in results if b is not None]
    low = min((lo for _, lo in results), key=lambda c: c.power_w)
    best = max(bests, key=lambda c: c.samples_per_s) if bests else low
    used = mps_pm if best.sharing == "mps" else pm
    clock = best.clock_mhz if best.clock_mhz is not None else used.default_clock_mhz(best.loads[0].batch,
                                                                                     len(best.loads))
    plan = Plan(pm.model, power_cap_w, bool(bests), best, clock,
                searched=len(clocks) * len(batches) * n_max * len(sharing))
    _notes(plan, mps_pm if best.sharing == "mps" else pm, table)
    plan.commands = commands(plan, gpu_index, power_limit_range_w, tenant_command)
    return plan


def _notes(plan: Plan, pm: PowerModel, table) -> None:
    best, notes = plan.best, plan.notes
    if not plan.feasible:
        notes.append(f"no configuration is predicted under {plan.power_cap_w:g} W; the lowest predicted power is "
                     f"{best.power_w:.0f} W (shown)")
    lo, hi = pm.clock_range_mhz
    if best.clock_mhz is not None and not lo * 0.9 <= best.clock_mhz <= hi * 1.1:
        notes.append(f"the clock {best.clock_mhz:.0f} MHz is outside the measured {lo:.0f}-{hi:.0f} MHz: "
                     "extrapolated" + ("" if pm.clock_fitted else " with the priors (throughput ~ clock, busy power ~ "
                                       "clock^2); bench at set clocks to fit them"))
    if best.sharing == "mps" and not pm.mps:
        notes.append("MPS predicted from time-sliced measurements: bench under MPS to confirm")
    if table is not None:
        plan.measured = nearest_measured(table, pm.model, best)
        idle = (plan.measured or {}).get("gpu_idle_from_data_share")
        if idle is not None and idle > 0.1:
            notes.append(f"at the nearest measured point the GPU sat idle waiting for data {idle:.0%} of its time: "
                         "under a cap that budget is wasted; fix the input pipeline first (lotus analyze)")


def nearest_measured(table, model: str, best: Config) -> dict | None:
    """The measured row nearest to ``best`` (same model; tenants, then batch in log2)."""
    df = table[table["model"].astype(str) == model]
    if "error" in df.columns:
        df = df[df["error"].isna() | (df["error"].astype(str).str.strip() == "")]
    if df.empty:
        return None
    n, b = len(best.loads), best.loads[0].batch
    d = (df["tenants"].astype(float) - n).abs() * 10 + (df["batch"].astype(float).map(math.log2) - math.log2(b)).abs()
    r = df.loc[d.idxmin()]
    keys = ("batch", "tenants", "samples_per_s", "power_w", "energy_j_per_sample", "gpu_idle_from_data_share",
            "sm_clock_mhz")
    return {k: (float(r[k]) if k in r and r[k] == r[k] else None) for k in keys}


def commands(plan: Plan, gpu: int, limit_range_w, tenant_command: str) -> list[str]:
    """What a privileged user would run to apply the plan (lotus runs none of it)."""
    best, out = plan.best, []
    cap = plan.power_cap_w
    if not plan.feasible:
        out.append(f"# no configuration is predicted under {cap:g} W: these apply the lowest-power one, "
                   "without a power limit")
    elif limit_range_w and not limit_range_w[0] <= cap <= limit_range_w[1]:
        out.append(f"# {cap:g} W is outside this GPU's power-limit range {limit_range_w[0]:g}-{limit_range_w[1]:g} W")
    else:
        out.append(f"sudo nvidia-smi -i {gpu} -pl {cap:g}")
    if best.clock_mhz is not None:
        out.append(f"sudo nvidia-smi -i {gpu} -lgc {best.clock_mhz:.0f},{best.clock_mhz:.0f}")
    if best.sharing == "mps":
        out += [f"sudo nvidia-smi -i {gpu} -c EXCLUSIVE_PROCESS", "nvidia-cuda-mps-control -d"]
        out += [f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={ld.share * 100:.0f} {tenant_command.format(batch=ld.batch)} &"
                for ld in best.loads]
    else:
        out += [f"{tenant_command.format(batch=ld.batch)} &" for ld in best.loads]
    undo = []
    if best.sharing == "mps":
        undo += ["echo quit | nvidia-cuda-mps-control", f"sudo nvidia-smi -i {gpu} -c DEFAULT"]
    if best.clock_mhz is not None:
        undo.append(f"sudo nvidia-smi -i {gpu} -rgc")
    undo.append(f"sudo nvidia-smi -i {gpu} -pl <the default limit>")
    out.append("# undo: " + "; ".join(undo))
    return out


def format_plan(plan: Plan, clocks_from: str = "") -> list[str]:
    """The plan as lines of text (the CLI prints them)."""
    b = plan.best
    head = (f"plan for {plan.model} under {plan.power_cap_w:g} W" if plan.feasible
            else f"no plan for {plan.model} under {plan.power_cap_w:g} W: the lowest-power configuration instead")
    clock = (f"{b.clock_mhz:.0f} MHz (locked)" if b.clock_mhz is not None
             else f"default (the GPU chose about {plan.predicted_clock_mhz:.0f} MHz)")
    same = len({ld.batch for ld in b.loads}) == 1 and len({round(ld.share, 6) for ld in b.loads}) == 1
    if b.sharing == "time-sliced":
        who = f"{len(b.loads)} tenant(s) x batch {b.loads[0].batch}, time-sliced"
    elif same:
        who = f"{len(b.loads)} tenant(s) x batch {b.loads[0].batch}, MPS {b.loads[0].share:.0%} each"
    else:
        who = "MPS: " + ", ".join(f"batch {ld.batch} at {ld.share:.0%}" for ld in b.loads)
    lines = [head, f"  SM clock   {clock}" + (f"; clocks from {clocks_from}" if clocks_from else ""),
             f"  tenants    {who}",
             f"  predicted  {b.samples_per_s:.1f} samples/s, {b.power_w:.1f} W, {b.energy_j_per_sample:.4f} J/sample"]
    m = plan.measured
    if m:
        def f(v, spec):
            return "n/a" if v is None else format(v, spec)

        lines.append(f"  measured   nearest point ({f(m['tenants'], '.0f')} tenant(s), batch {f(m['batch'], '.0f')}, "
                     f"{f(m['sm_clock_mhz'], '.0f')} MHz): {f(m['samples_per_s'], '.1f')} samples/s, "
                     f"{f(m['power_w'], '.1f')} W, {f(m['energy_j_per_sample'], '.4f')} J/sample, GPU idle from data "
                     f"{f(m['gpu_idle_from_data_share'], '.0%')}")
    lines += [f"note: {n}" for n in plan.notes]
    lines.append("commands a privileged user would run to apply it (lotus runs none of them):")
    lines += [f"  {c}" for c in plan.commands]
    return lines
