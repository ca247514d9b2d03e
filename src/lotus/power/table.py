"""The tidy table of ``lotus power bench`` (one row per point: model x batch x tenants x clock).

Units are in the column names. A user's own table (made at set clocks, say) needs only the columns of
:data:`lotus.model.power.REQUIRED`; the others are optional. Failed points keep their row, with the
reason in ``error`` and empty measurements; readers skip them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from lotus.errors import InputError

_log = logging.getLogger("lotus.power")

# column -> meaning (units in the name)
COLUMNS: dict[str, str] = {
    "model": "torchvision model name, or the command's script name",
    "batch": "batch size of each tenant (samples)",
    "tenants": "processes sharing the GPU",
    "share": "share of the GPU per tenant: 1/tenants (time-sliced) or the MPS thread percentage / 100",
    "mps": "an MPS control daemon was active for this user (read-only detection)",
    "sharing": "'time-sliced' or 'mps'",
    "compute_mode": "NVML compute mode (Default, Exclusive_Process, Prohibited)",
    "samples_per_s": "throughput summed over tenants",
    "latency_p50_ms": "median time of one batch (host to device copy + forward + synchronise), all tenants",
    "latency_p99_ms": "99th percentile of the same",
    "power_w": "mean board power over the window (energy counter / time; else mean of samples)",
    "energy_j_per_sample": "board energy over the window / samples",
    "sm_clock_mhz": "mean SM clock the GPU chose",
    "mem_clock_mhz": "mean memory clock",
    "gpu_util_pct": "mean NVML GPU utilisation",
    "gpu_idle_from_data_share": "GPU idle while tenants waited for data / GPU time, mean over tenants (traces)",
    "duration_s": "length of the measured window",
    "clock_mode": "'default' (the GPU chose its clocks), or the user's label for set clocks",
    "power_limit_w": "enforced power limit during the run (read-only)",
    "amp": "autocast dtype of the tenants ('off', 'fp16', 'bf16')",
    "channels_last": "the tenants ran in channels_last",
    "data": "'cached' (decoded once, then tensors from memory) or 'jpeg' (decoded every batch)",
    "device": "'cuda' or 'cpu' (dry run)",
    "host": "host name",
    "gpu_name": "NVML device name",
    "nvml_samples": "NVML samples in the window",
    "error": "why the point failed (empty when it did not)",
}
REQUIRED_FIT = ("model", "batch", "tenants", "samples_per_s", "power_w", "sm_clock_mhz")


def read_table(path: str | os.PathLike, required: tuple[str, ...] = REQUIRED_FIT):
    """A bench table (CSV or Parquet). InputError (one line naming the file and the column) when it
    cannot be read or misses a column."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", p)
    try:
        df = pd.read_parquet(p) if p.suffix.lower() in (".parquet", ".pq") else pd.read_csv(p)
    except ImportError as exc:
        raise InputError(f"cannot read it: {exc}", p) from None
    except Exception as exc:
        raise InputError(f"not a CSV/Parquet table ({type(exc).__name__}: {exc})", p) from None
    for col in required:
        if col not in df.columns:
            raise InputError(f"missing column '{col}' ({COLUMNS.get(col, 'required')})", p)
    for col in ("batch", "tenants", "samples_per_s", "power_w", "sm_clock_mhz"):
        if col in required and col in df.columns:
            bad = pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna()
            if bad.any():
                line = int(bad.to_numpy().nonzero()[0][0]) + 2  # header is line 1
                raise InputError(f"column '{col}' holds a non-number ({df[col][bad].iloc[0]!r})", p, line)
    return df


def read_tables(paths) -> object:
    """Several tables, concatenated (the columns of the first decide nothing: all are kept)."""
    import pandas as pd

    frames = [read_table(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def usable(df):
    """Rows without an error."""
    if "error" not in df.columns:
        return df
    err = df["error"]
    return df[err.isna() | (err.astype(str).str.strip() == "")]


def write_table(df, path: str | os.PathLike) -> Path:
    """CSV, or Parquet when the name ends in .parquet; the columns of :data:`COLUMNS` first."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    df = df[cols]
    tmp = p.with_name(f".{p.name}.tmp")
    if p.suffix.lower() in (".parquet", ".pq"):
        df.to_parquet(tmp, index=False)
    else:
        df.to_csv(tmp, index=False)
    os.replace(tmp, p)
    return p


def fit_models(df, model: str | None, source: str | os.PathLike):
    """(time-sliced fit or None, MPS fit or None) of one model of the table; InputError naming
    ``source`` when the table cannot give one."""
    from lotus.model.power import fit_power_model

    df = usable(df)
    names = sorted(df["model"].astype(str).unique())
    if model is None:
        if len(names) != 1:
            raise InputError(f"holds {len(names)} models ({', '.join(names) or 'none usable'}): choose one with -m",
                             source)
        model = names[0]
    elif model not in names:
        raise InputError(f"no usable rows for model {model!r} (models: {', '.join(names) or 'none'})", source)
    rows = df[df["model"].astype(str) == model]
    mps = rows["mps"].astype(str).str.lower().isin(("true", "1", "yes")) if "mps" in rows.columns else None
    fits = []
    for flag in (False, True):
        part = rows if mps is None and not flag else (rows[mps == flag] if mps is not None else rows.iloc[:0])
        if len(part) == 0:
            fits.append(None)
            continue
        try:
            fits.append(fit_power_model(part, model))
        except ValueError as exc:
            raise InputError(str(exc), source) from None
    if fits[0] is None and fits[1] is None:
        raise InputError(f"no usable rows for model {model!r}", source)
    return fits[0], fits[1]


def sidecar(path: str | os.PathLike) -> Path:
    """Where the bench keeps what it read of the GPU (name, supported clocks, power limits) beside a table."""
    p = Path(path)
    return p.with_name(p.name + ".gpu.json")


def write_sidecar(path: str | os.PathLike, doc: dict) -> None:
    from lotus.analysis.jsonutil import dumps

    sidecar(path).write_text(dumps(doc))


def read_sidecar(path: str | os.PathLike) -> dict | None:
    import json

    try:
        return json.loads(sidecar(path).read_text())
    except (OSError, ValueError):
        return None


def prediction_table(pm, table, use_measured_clock: bool = True):
    """Measured vs predicted for the rows of ``table`` of this model (and sharing mode)."""
    import pandas as pd

    from lotus.model.power import prepare

    rows = []
    for r in prepare(table, pm.model, pm.mps).itertuples(index=False):
        pr = pm.predict(int(r.batch), int(r.tenants), float(r.sm_clock_mhz) if use_measured_clock else None,
                        float(r.share))
        rows.append({"model": pm.model, "batch": int(r.batch), "tenants": int(r.tenants), "share": float(r.share),
                     "sm_clock_mhz": pr.clock_mhz, "samples_per_s": float(r.samples_per_s),
                     "samples_per_s_pred": pr.samples_per_s, "power_w": float(r.power_w), "power_w_pred": pr.power_w})
    out = pd.DataFrame(rows)
    if len(out):
        out["samples_per_s_err_pct"] = (out["samples_per_s_pred"] / out["samples_per_s"] - 1) * 100
        out["power_w_err_pct"] = (out["power_w_pred"] / out["power_w"] - 1) * 100
    return out
