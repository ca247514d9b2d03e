"""Throughput and power of inference on one shared GPU as functions of batch size, share and SM clock.

Pure numpy/pandas (no torch). GPU time of a batch ``g = F(f)*(a + c*b*s**-kappa)``; a tenant alone takes
``(l**p + g**p)**(1/p)`` per batch; time-sliced tenants are a closed queue on the GPU (mean-value
analysis, queueing term scaled by ``nu``, switching cost ``sigma``); MPS tenants run isolated on their
shares; power ``P_idle + (f/f0)**eta*P_busy*u*b/(b + b_half) + (f/f0)**(eta-1)*E_dyn*X``. docs/power.md
gives the family, why, and how it is fitted. ``phi`` (in ``F``) and ``eta`` are fitted only when the
table's clocks span at least 15 %, else they keep their priors (1 and 2), as does ``kappa`` (1) for MPS
predicted from time-sliced rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

REQUIRED = ("model", "batch", "tenants", "samples_per_s", "power_w", "sm_clock_mhz")
PHI_PRIOR, ETA_PRIOR, KAPPA_PRIOR, CLOCK_SPREAD = 1.0, 2.0, 1.0, 0.15  # spread: clock span needed to fit phi, eta
_PHIS, _ETAS = np.round(np.arange(0.0, 1.0001, 0.1), 4), np.round(np.arange(1.0, 3.5001, 0.1), 4)
_KAPPAS, _HALF_BATCHES = np.round(np.arange(0.0, 1.5001, 0.025), 4), (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


@dataclass(frozen=True)
class ThroughputParams:
    host_ms: float  # l: host time of a batch (data, Python, kernel launches)
    gpu_fixed_ms: float  # a: GPU time per batch whatever its size (whole GPU, reference clock)
    gpu_per_sample_ms: float  # c: GPU time per sample (whole GPU, reference clock)
    overlap: float  # p >= 1: a batch takes (l**p + g**p)**(1/p); 1: host and GPU in series, large: overlapped
    contention: float  # nu: 0 deterministic queueing of time-sliced tenants, 1 exponential
    switch_ms: float  # sigma: GPU time lost per batch to switching between time-sliced tenants
    share_exponent: float  # kappa: per-sample GPU time grows as share**-kappa (MPS)
    clock_fraction: float  # phi: part of GPU time that scales with 1/clock
    ref_clock_mhz: float  # f0


@dataclass(frozen=True)
class PowerParams:
    idle_w: float  # board power with nothing running
    busy_w: float  # extra power when the SMs are busy all the time (reference clock)
    dynamic_j_per_sample: float  # extra energy per sample (reference clock)
    clock_exponent: float  # eta
    half_batch: float  # SM occupancy of busy time b/(b + half_batch); 0: full at any batch


@dataclass(frozen=True)
class TenantLoad:
    batch: int
    share: float  # 0-1: 1/tenants when time-sliced, MPS thread percentage / 100


@dataclass(frozen=True)
class PowerPrediction:
    samples_per_s: float
    power_w: float  # NaN without a power fit
    energy_j_per_sample: float
    batch_period_ms: tuple[float, ...]  # per tenant: time between two of its batches
    gpu_busy_fraction: float
    clock_mhz: float


def _gpu_ms(tp: ThroughputParams, b, f, s=1.0):
    fac = tp.clock_fraction * tp.ref_clock_mhz / np.asarray(f, dtype=float) + (1.0 - tp.clock_fraction)
    return fac * (tp.gpu_fixed_ms + tp.gpu_per_sample_ms * np.asarray(b, float) * np.power(s, -tp.share_exponent))


def _alone_ms(tp: ThroughputParams, g):
    """Time of one batch of a tenant alone: host and GPU time, overlapped as ``overlap`` says."""
    m = np.maximum(np.maximum(tp.host_ms, g), 1e-12)
    p = min(tp.overlap, 50.0)
    return m * ((tp.host_ms / m) ** p + (g / m) ** p) ** (1.0 / p)


def time_sliced(tp: ThroughputParams, b, n, f):
    """(per-tenant period ms, SM busy fraction) of ``n`` equal time-sliced tenants (arrays broadcast)."""
    b, n = np.broadcast_arrays(np.asarray(b, float), np.asarray(n, float))
    g = np.maximum(np.broadcast_to(_gpu_ms(tp, b, f), b.shape), 1e-12)
    sv = g + tp.switch_ms * (n >= 2)  # service time of a batch when tenants alternate
    h, q, x_n = _alone_ms(tp, g) - g, np.zeros(b.shape), np.zeros(b.shape)  # h: think time of the queue
    for k in range(1, int(n.max()) + 1):
        r = sv * (1.0 + tp.contention * q)
        x = np.minimum(k / (h + r), 1.0 / sv)  # batches per ms, all tenants
        q = np.where(k <= n, x * r, q)
        x_n = np.where(k == n, x, x_n)
    return n / x_n, x_n * g


def _mps(tp: ThroughputParams, b, s, f):
    period = _alone_ms(tp, g := _gpu_ms(tp, b, f, s))
    return period, np.asarray(s, float) * g / period


def _nnls(A: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares for a few columns: the best feasible solution over all supports."""
    best, best_sse = np.zeros(A.shape[1]), float(np.sum(y * y))
    for k in range(1, A.shape[1] + 1):
        for cols in itertools.combinations(range(A.shape[1]), k):
            x, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
            sse = float(np.sum((A[:, cols] @ x - y) ** 2))
            if np.all(x >= 0) and sse < best_sse - 1e-15:
                best, best_sse = np.zeros(A.shape[1]), sse
                best[list(cols)] = x
    return best, best_sse


def _levenberg_marquardt(fun, theta: np.ndarray, iters: int = 200) -> tuple[np.ndarray, float]:
    """Least squares of ``fun(theta)`` (residuals) from ``theta``; forward-difference Jacobian."""
    sse, lam = float((r := fun(theta)) @ r), 1e-3
    for _ in range(iters):
        steps = 1e-6 * np.maximum(1.0, np.abs(theta))
        J = np.column_stack([(fun(theta + np.eye(len(theta))[j] * steps[j]) - r) / steps[j]
                             for j in range(len(theta))])
        A, grad = J.T @ J, J.T @ r
        improved = False
        while lam < 1e10:
            cand = theta - np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), grad)
            if np.isfinite(sc := float((rc := fun(cand)) @ rc)) and sc < sse:
                improved = sse - sc > 1e-12 * max(sse, 1e-30)
                theta, r, sse, lam = cand, rc, sc, max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved:
            break
    return theta, sse


def _logistic(v) -> float:
    return float(1 / (1 + math.exp(-np.clip(v, -30, 30))))


def _fit_time_sliced(b, n, f, x, f0, clock_fitted: bool) -> ThroughputParams:
    """Levenberg-Marquardt on log throughput ratios over (l, a, c, p, nu, sigma[, phi]), a few starts."""
    period = n * b / x * 1e3  # observed per-tenant period (ms)
    single = (n == 1).sum() >= 2  # init: single tenants (T = l + g), else "every tenant waits for all"
    sel, k = (n == 1, np.ones_like(n)) if single else (np.ones(len(n), dtype=bool), n)
    fac = f0 / f
    init, _ = _nnls(np.column_stack([np.ones_like(b), fac * k, fac * b * k])[sel] / period[sel, None],
                    np.ones(sel.sum()))

    def params(t):  # logs keep l, a, c, p - 1, sigma positive and scale-free; logistics keep nu, phi in (0, 1)
        e = np.exp(np.clip(t[:6], -40, 15))
        phi = _logistic(t[6]) if clock_fitted else PHI_PRIOR
        return ThroughputParams(float(e[0]), float(e[1]), float(e[2]), 1.0 + float(e[3]), _logistic(t[4]),
                                float(e[5]), KAPPA_PRIOR, phi, f0)

    def resid(t):  # log ratio: symmetric, nothing gained by predicting zero throughput
        p, _ = time_sliced(params(t), b, n, f)
        return np.log(p / period)

    best, scale = None, float(np.median(period))
    fixed = max((init[0] + init[1]) / 2, 1e-3 * scale)  # l and a are one constant for lone tenants: split it
    for p0, nu0 in itertools.product((0.1, 3.0), (-2.0, 2.0)):
        start = np.append(np.log([fixed, fixed, max(init[2], 1e-6 * scale), p0]), [nu0, math.log(0.01 * scale)])
        theta, sse = _levenberg_marquardt(resid, np.append(start, 2.0) if clock_fitted else start)
        if best is None or sse < best[0]:
            best = (sse, params(theta))
    return best[1]


def _fit_mps(b, s, n, f, x, f0, clock_fitted: bool) -> ThroughputParams:
    """Non-negative least squares over a grid of (kappa, phi); host and GPU in series (p = 1)."""
    period, best = n * b / x * 1e3, None
    kappas = _KAPPAS if len(np.unique(np.round(s, 6))) > 1 else np.array([KAPPA_PRIOR])
    for kappa, phi in itertools.product(kappas, _PHIS if clock_fitted else (PHI_PRIOR,)):
        fac = phi * f0 / f + (1 - phi)
        A = np.column_stack([np.ones_like(b), fac, fac * b * np.power(s, -kappa)]) / period[:, None]
        coef, sse = _nnls(A, np.ones_like(b))
        if best is None or sse < best[0] - 1e-12:
            best = (sse, ThroughputParams(*map(float, coef), 1.0, 0.0, 0.0, float(kappa), float(phi), f0))
    return best[1]


def _rel_errors(pred, meas) -> dict:
    e = np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0) * 100
    e = e[np.isfinite(e)]
    return {"median_pct": float(np.median(e)) if len(e) else None, "max_pct": float(e.max()) if len(e) else None,
            "n": len(e)}


def _occupancy(b, half: float):  # SM occupancy of busy time at batch b
    return (b := np.asarray(b, float)) / (b + half)


def _power(pp: PowerParams, g, active, x):
    """Board power at clock ratio ``g`` with SM activity ``active`` (busy x occupancy) and ``x`` samples/s."""
    return pp.idle_w + np.power(g, pp.clock_exponent) * pp.busy_w * active + \
        np.power(g, pp.clock_exponent - 1.0) * pp.dynamic_j_per_sample * x


@dataclass(frozen=True)
class PowerModel:
    model: str
    mps: bool  # fitted on MPS rows (else time-sliced)
    throughput: ThroughputParams
    power: PowerParams | None
    clock_fitted: bool  # phi and eta fitted (the table spans enough clocks) or priors
    clock_range_mhz: tuple[float, float]
    batches: tuple[int, ...]
    tenants: tuple[int, ...]
    rows: int
    fit_error: dict = field(default_factory=dict)  # throughput/power: median/max % on the fit rows
    _points: tuple = field(default=(), repr=False)  # (batch, tenants, clock) of the fit rows

    def default_clock_mhz(self, batch: int, tenants: int) -> float:
        """The clock the GPU chose at the nearest measured (batch, tenants) point."""
        pts = np.asarray(self._points or [(1.0, 1.0, self.throughput.ref_clock_mhz)], dtype=float)
        d = (np.log2(pts[:, 0]) - math.log2(batch)) ** 2 + (np.log2(pts[:, 1]) - math.log2(tenants)) ** 2
        return float(np.median(pts[d <= d.min() + 1e-9, 2]))

    def predict(self, batch: int, tenants: int = 1, clock_mhz: float | None = None,
                share: float | None = None, mps: bool | None = None) -> PowerPrediction:
        """``tenants`` equal tenants of ``batch`` each; ``share`` (MPS) defaults to 1/tenants."""
        s = (1.0 / tenants) if share is None else float(share)
        clock = self.default_clock_mhz(batch, tenants) if clock_mhz is None else float(clock_mhz)
        return self.predict_mix([TenantLoad(batch, s)] * tenants, clock, mps)

    def predict_mix(self, loads: Sequence[TenantLoad], clock_mhz: float, mps: bool | None = None) -> PowerPrediction:
        """Tenants with their own batch and share under MPS (``mps``, default: the fit's mode); time-sliced
        tenants must all have the same batch (their shares are time slices)."""
        tp = self.throughput
        b = np.array([ld.batch for ld in loads], dtype=float)
        if self.mps if mps is None else mps:
            period, busy = _mps(tp, b, np.array([ld.share for ld in loads], dtype=float), clock_mhz)
        else:
            if len(set(b)) > 1:
                raise ValueError("time-sliced tenants are modelled with one batch size")
            p1, u1 = time_sliced(tp, b[:1], len(b), clock_mhz)
            period, busy = np.repeat(p1, len(b)), np.repeat(u1 / len(b), len(b))
        x, u = float(np.sum(b / period) * 1e3), float(min(1.0, busy.sum()))
        active = min(1.0, float(np.sum(busy * _occupancy(b, self.power.half_batch)))) if self.power else 0.0
        p = _power(self.power, clock_mhz / tp.ref_clock_mhz, active, x) if self.power is not None else math.nan
        return PowerPrediction(samples_per_s=x, power_w=float(p), energy_j_per_sample=p / x if x > 0 else math.nan,
                               batch_period_ms=tuple(float(v) for v in period), gpu_busy_fraction=u,
                               clock_mhz=float(clock_mhz))

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "_points"}


def prepare(table, model: str | None = None, mps: bool | None = None):
    """The usable rows of a table (no error, positive numbers), with ``share`` and ``mps`` filled in."""
    import pandas as pd

    if missing := [c for c in REQUIRED if c not in table.columns]:
        raise KeyError(missing[0])
    df = table if (err := table.get("error")) is None else table[err.isna() | (err.astype(str).str.strip() == "")]
    df = (df if model is None else df[df["model"].astype(str) == model]).copy()
    df["mps"] = df["mps"].astype(str).str.lower().isin(("true", "1", "yes")) if "mps" in df.columns else False
    df = (df if mps is None else df[df["mps"] == mps]).copy()
    cols = ["batch", "tenants", "samples_per_s", "power_w", "sm_clock_mhz"]
    df[cols] = df[cols].apply(pd.to_numeric, errors="coerce")
    share = pd.to_numeric(df["share"], errors="coerce") if "share" in df.columns else df["tenants"] * math.nan
    df["share"] = share.fillna(1.0 / df["tenants"])
    ok = (df["batch"] > 0) & (df["tenants"] > 0) & (df["samples_per_s"] > 0) & (df["sm_clock_mhz"] > 0)
    return df[ok & (df["share"] > 0)]


def fit_power_model(table, model: str | None = None, mps: bool | None = None) -> PowerModel:
    """Fit one model's rows (``model`` may be omitted when the table holds one; time-sliced rows unless
    ``mps`` or the table has MPS rows only). ValueError when the rows cannot determine the model;
    KeyError(column) when a required column is missing."""
    df = prepare(table, model, mps)
    names = sorted(df["model"].astype(str).unique())
    if len(names) != 1:
        raise ValueError(f"{'no usable rows' if not names else 'several models: ' + ', '.join(names)}"
                         f"{'' if model is None else ' for model ' + model}")
    if df["mps"].nunique() > 1:
        df = df[~df["mps"]]
    if len(df) < 3:
        raise ValueError(f"{len(df)} usable row(s) for {names[0]}: at least 3 are needed")
    mps_mode = bool(df["mps"].iloc[0])
    b, n, s = df["batch"].to_numpy(float), df["tenants"].to_numpy(float), df["share"].to_numpy(float)
    f, x = df["sm_clock_mhz"].to_numpy(float), df["samples_per_s"].to_numpy(float)
    f0, clock_fitted = float(np.median(f)), bool((f.max() - f.min()) / f.max() >= CLOCK_SPREAD)
    tp = _fit_mps(b, s, n, f, x, f0, clock_fitted) if mps_mode else _fit_time_sliced(b, n, f, x, f0, clock_fitted)
    period, u = _mps(tp, b, s, f) if mps_mode else time_sliced(tp, b, n, f)
    u = np.minimum(1.0, n * u) if mps_mode else u  # MPS: n equal tenants, each busy on its share
    x_pred = n * b / period * 1e3
    fit_error = {"throughput": _rel_errors(x_pred, x)}
    pp, p = None, df["power_w"].to_numpy(float)
    if (okp := np.isfinite(p) & (p > 0)).sum() >= 3:
        g, bestp = f[okp] / f0, None
        for eta, half in itertools.product(_ETAS if clock_fitted else (ETA_PRIOR,), _HALF_BATCHES):
            act = u[okp] * _occupancy(b[okp], half)
            A = np.column_stack([np.ones(okp.sum()), g ** eta * act, g ** (eta - 1) * x_pred[okp]]) / p[okp, None]
            coef, sse = _nnls(A, np.ones(okp.sum()))
            if bestp is None or sse < bestp[0] - 1e-12:
                bestp = (sse, PowerParams(*map(float, coef), float(eta), float(half)), act)
        pp = bestp[1]
        fit_error["power"] = _rel_errors(_power(pp, g, bestp[2], x_pred[okp]), p[okp])
    return PowerModel(model=names[0], mps=mps_mode, throughput=tp, power=pp, clock_fitted=clock_fitted,
                      clock_range_mhz=(float(f.min()), float(f.max())),
                      batches=tuple(sorted({int(v) for v in b})), tenants=tuple(sorted({int(v) for v in n})),
                      rows=len(df), fit_error=fit_error,
                      _points=tuple((float(bb), float(nn), float(ff)) for bb, nn, ff in zip(b, n, f, strict=True)))

