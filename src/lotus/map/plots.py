"""Figures of ``lotus hw``: each function takes a DataFrame and returns a matplotlib Figure (Agg)."""

from __future__ import annotations

from lotus.map.hw import TOPDOWN
from lotus.map.mapping import natural_key

METRIC_LABELS = {
    "cpu_time_s": "CPU time (s)",
    "clockticks": "clockticks",
    "instructions_retired": "instructions retired",
    "cpi": "CPI (clockticks / instruction)",
    "retiring_frac": "retiring",
    "front_end_bound_frac": "front-end bound",
    "bad_speculation_frac": "bad speculation",
    "memory_bound_frac": "memory bound",
    "core_bound_frac": "core bound",
    "average_frequency_ghz": "frequency (GHz)",
    "cpu_time_share": "share of CPU time",
}
OP_METRICS = ("cpu_time_s", "cpi", *TOPDOWN, "average_frequency_ghz")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _short(name: str, n: int = 38) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _configs(df) -> list[str]:
    return sorted(df["config"].astype(str).unique(), key=natural_key)


def function_stack_data(functions, metric: str, top: int = 12):
    """config x function table of ``metric`` (summed over ops), top functions then ``other``."""
    per = functions.groupby(["config", "function"], sort=False)[metric].sum().unstack("function", fill_value=0.0)
    per = per.reindex(_configs(functions))
    order = per.sum(axis=0).sort_values(ascending=False).index
    keep = list(order[:top])
    out = per[keep].copy()
    rest = [c for c in per.columns if c not in keep]
    if rest:
        out["other"] = per[rest].sum(axis=1)
    return out


def plot_function_stacks(functions, metric: str = "cpu_time_s", top: int = 12):
    """Per config, a bar of ``metric`` stacked by native function (the ``top`` largest, then other)."""
    data = function_stack_data(functions, metric, top)
    fig = _figure(max(6.0, 1.2 * len(data) + 5.0), 5.0)
    ax = fig.add_subplot()
    bottom = [0.0] * len(data)
    cmap = _cmap(len(data.columns))
    for i, col in enumerate(data.columns):
        vals = data[col].to_numpy()
        ax.bar(range(len(data)), vals, bottom=bottom, label=_short(str(col)), color=cmap[i])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(data)), [str(c) for c in data.index], rotation=20, ha="right")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{METRIC_LABELS.get(metric, metric)} by native function")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_function_topdown(functions, top: int = 10):
    """Per config, the top-down breakdown (retiring, front-end, bad speculation, memory, core) of hot functions."""
    configs = _configs(functions)
    cols = [c for c in TOPDOWN if c in functions.columns]
    fig = _figure(12.0, 1.0 + 0.35 * top * len(configs))
    cmap = _cmap(len(cols))
    for k, config in enumerate(configs):
        ax = fig.add_subplot(len(configs), 1, k + 1)
        part = functions[functions["config"] == config]
        size_col = "cpu_time_s" if "cpu_time_s" in part else cols[0]
        totals = part.groupby("function", sort=False)[size_col].sum()
        part = part.drop_duplicates("function").set_index("function")
        part = part.loc[totals.sort_values(ascending=False).index[:top]].reset_index()
        left = [0.0] * len(part)
        for i, c in enumerate(cols):
            vals = part[c].fillna(0.0).to_numpy()
            ax.barh(range(len(part)), vals, left=left, color=cmap[i], label=METRIC_LABELS.get(c, c))
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.set_yticks(range(len(part)), [_short(f, 48) for f in part["function"]], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_title(config, fontsize=9)
        if k == 0:
            ax.legend(fontsize=7, ncol=len(cols), loc="lower left", bbox_to_anchor=(0, 1.08))
    return fig


def plot_op_metrics(ops, metrics: tuple[str, ...] = OP_METRICS):
    """One panel per metric: the Python ops on x, one bar per config."""
    metrics = tuple(m for m in metrics if m in ops.columns)
    configs = _configs(ops)
    op_names = list(dict.fromkeys(ops["op"]))
    n = len(metrics)
    cols = 3
    rows = (n + cols - 1) // cols
    fig = _figure(5.0 * cols, 3.2 * rows)
    width = 0.8 / max(1, len(configs))
    cmap = _cmap(len(configs))
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        for j, config in enumerate(configs):
            part = ops[ops["config"] == config].set_index("op")[metric].reindex(op_names)
            ax.bar([i + j * width for i in range(len(op_names))], part.fillna(0.0).to_numpy(), width,
                   label=config, color=cmap[j])
        ax.set_xticks([i + width * (len(configs) - 1) / 2 for i in range(len(op_names))],
                      [_short(o, 22) for o in op_names], rotation=35, ha="right", fontsize=7)
        ax.set_title(METRIC_LABELS.get(metric, metric), fontsize=9)
        if k == 0:
            ax.legend(fontsize=7)
    return fig


def plot_trace_ops(trace):
    """Traced CPU seconds per op, one bar per traced run."""
    runs = sorted(trace["run"].astype(str).unique(), key=natural_key)
    ops = list(dict.fromkeys(trace["op"]))
    fig = _figure(max(6.0, 1.0 * len(ops) + 3), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(runs))
    cmap = _cmap(len(runs))
    for j, run in enumerate(runs):
        part = trace[trace["run"].astype(str) == run].set_index("op")["cpu_s"].reindex(ops)
        ax.bar([i + j * width for i in range(len(ops))], part.fillna(0.0).to_numpy(), width, label=run, color=cmap[j])
    ax.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(len(ops))], ops, rotation=20, ha="right")
    ax.set_ylabel("traced CPU time (s)")
    ax.set_title("CPU seconds per op (trace)")
    ax.legend(fontsize=7)
    return fig


def plot_elapsed(summary):
    """Elapsed time of each config's VTune collection."""
    data = summary.set_index("config")["elapsed_time_s"]
    data = data.reindex(sorted(data.index, key=natural_key))
    fig = _figure(max(5.0, 1.0 * len(data) + 3), 3.5)
    ax = fig.add_subplot()
    ax.bar(range(len(data)), data.to_numpy(), color=_cmap(1)[0])
    ax.set_xticks(range(len(data)), list(data.index), rotation=20, ha="right")
    ax.set_ylabel("elapsed time (s)")
    ax.set_title("Elapsed time (VTune summary)")
    return fig


def _cmap(n: int) -> list:
    from matplotlib import colormaps

    base = colormaps["tab20"] if n > 10 else colormaps["tab10"]
    return [base(i % base.N) for i in range(max(1, n))]
