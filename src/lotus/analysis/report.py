"""One self-contained HTML report (figures embedded as base64 PNG, inline CSS, no script, no network)
plus the same numbers as JSON.

``build_report(configs)`` -> dict (the JSON); ``render_html(report, figures)`` -> str.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from lotus.analysis.diagnosis import verdict
from lotus.analysis.htmlfmt import figure_png
from lotus.analysis.htmlfmt import fmt as _fmt
from lotus.analysis.htmlfmt import pct as _pct
from lotus.analysis.htmlfmt import table as _table
from lotus.analysis.info import outcome_note
from lotus.analysis.jsonutil import dumps
from lotus.analysis.stats import config_stats
from lotus.analysis.trends import trends
from lotus.analysis.wait import wait_stats
from lotus.query import outcome_summary

_CLASS_COLOR = {"fine": "#2e7d32", "input-bound": "#ef6c00", "severely input-bound": "#c62828", "unknown": "#616161"}
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;
color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}th,td{padding:.25em .7em;border-bottom:1px solid #eee;
text-align:right}th{background:#f6f6f6}td:first-child,th:first-child{text-align:left}
.verdict{border-left:6px solid;padding:.6em 1em;margin:1em 0;background:#fafafa}
.cls{font-weight:bold;text-transform:uppercase;letter-spacing:.03em}
.muted{color:#666;font-size:.9em}figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.9em}ul.sugg li{margin:.3em 0}
"""


def build_report(configs, *, remove_outliers: bool = False, data_dir: str | None = None) -> dict:
    """The report's numbers: verdict, statistics and wait summary of every config."""
    from lotus import __version__

    out = {"lotus_version": __version__, "data_dir": data_dir, "remove_outliers": remove_outliers, "configs": {}}
    for c in configs:
        b = c.summary_batches  # a scanned run's table: each reads the columns it needs, not the whole DataFrame
        out["configs"][c.name] = {
            "path": str(c.path),
            "formats": sorted(c.formats),
            "verdict": verdict(c.events, b, loaders=c.loaders),
            "stats": config_stats(c.events, b, remove_outliers=remove_outliers),
            "wait": wait_stats(b),
            "outcomes": outcome_summary(b),
            "throughput": _throughput(c),
            "trends": trends(c.events, b),
        }
        if len({int(f.get("rank") or 0) for f in c.files}) > 1:  # a distributed run: its stragglers
            from lotus.analysis.ranks import RANK_BATCH_COLUMNS, rank_report

            out["configs"][c.name]["ranks"] = rank_report(c.events, c.batches_of(RANK_BATCH_COLUMNS), c.loaders,
                                                          c.files)
    if data_dir is not None:
        from lotus.analysis.profiles import find_profiles

        out.update(find_profiles(data_dir))
    return out


def _throughput(c) -> dict:
    from lotus.analysis.throughput import throughput

    t = throughput(c.summary_batches, c.loaders)
    return {k: t.get(k) for k in ("samples_per_s", "ci95", "rel_halfwidth", "steady_batches", "window_s", "left_out",
                                  "note")}


def _headline(report: dict) -> str:
    rows = []
    for name, c in report["configs"].items():
        v, st = c["verdict"], c["stats"]
        slow = v.get("slowest_op") or {}
        t = c.get("throughput") or {}
        ci = t.get("ci95")
        rows.append([html.escape(name), f'<span style="color:{_CLASS_COLOR[v["class"]]}">{v["class"]}</span>',
                     _fmt(t.get("samples_per_s")) + (f" ({_fmt(ci[0])}-{_fmt(ci[1])})" if ci else ""),
                     _pct(v["wait_share"]), _fmt(v["batches"]), _fmt(st["batch_preprocessing_ms"]["mean"]),
                     html.escape(slow.get("name", "-")), _pct(slow.get("share_of_preprocessing")),
                     _pct(v["workers"]["mean_busy_share"])])
    return _table(["config", "verdict", "samples/s (95% CI)", "loop waiting", "batches consumed",
                   "batch prep. mean (ms)",
                   "slowest op", "its share", "workers busy"], rows)


def _config_section(name: str, c: dict) -> str:
    v, st, w = c["verdict"], c["stats"], c["wait"]
    color = _CLASS_COLOR[v["class"]]
    parts = [f"<h2>{html.escape(name)}</h2>", f'<p class="muted">{html.escape(c["path"])} '
             f'({", ".join(html.escape(f) for f in c["formats"])})</p>']
    share = "wait unknown" if v["wait_share"] is None else \
        f'the loop waited {v["wait_share"]:.1%} of {v["loop_s"]:.3g} s for data'
    parts.append(f'<div class="verdict" style="border-color:{color}"><span class="cls" style="color:{color}">'
                 f'{html.escape(v["class"])}</span> - {html.escape(share)}')
    if v["per_rank"] and len(v["per_rank"]) > 1:
        parts.append("<br><span class='muted'>per rank: " + ", ".join(
            f"rank {r}: {_pct(d['wait_share'])}" for r, d in v["per_rank"].items()) + "</span>")
    parts.append('<ul class="sugg">' + "".join(f"<li>{html.escape(s['text'])}</li>" for s in v["suggestions"])
                 + "</ul></div>")
    note = outcome_note(c.get("outcomes") or {})
    if note:
        parts.append(f'<p class="outcomes">{html.escape(note[0].upper() + note[1:])}.</p>')
    keys = ["count", "mean", "std_pct", "median", "p25", "p75", "p90", "p99", "min", "max", "sum"]
    rows = [["batch preprocessing", *[_fmt(st["batch_preprocessing_ms"][k]) for k in keys]]]
    rows += [[html.escape(op), *[_fmt(d[k]) for k in keys]] for op, d in st["ops_ms"].items()]
    parts.append("<h3>Preprocessing (ms)</h3>" + _table(["", *[k.replace("_pct", " %") for k in keys]], rows))
    if st.get("outliers_removed"):
        parts.append(f'<p class="muted">{st["outliers_removed"]} outlier batch(es) removed (q1 - 2 IQR).</p>')
    if w["known"]:
        b, hol = w["buckets"], w["head_of_line"]
        parts.append("<h3>Wait and delay</h3>" + _table(
            ["batches", "already buffered", "1 us - 1 ms", "> 1 ms", "> 500 ms", "wait mean (ms)", "wait p90 (ms)",
             "delay median (ms)", "head-of-line blocked (ms)", "in_order=False saving (ms)"],
            [[_fmt(w["batches"]), _pct(b["buffered"]), _pct(b["up_to_1ms"]), _pct(b["over_1ms"]),
              _pct(b["over_500ms"]), _fmt(w["wait_ms"]["mean"]), _fmt(w["wait_ms"]["p90"]),
              _fmt(w["delay_ms"]["median"]), _fmt(hol["blocked_ms"]), _fmt(hol["in_order_false_saving_ms"])]]))
    else:
        parts.append(f'<h3>Wait and delay</h3><p class="muted">Wait unknown: {html.escape(w["reason"])}.</p>')
    if c.get("ranks"):
        parts.append(_ranks_section(c["ranks"]))
    parts.append(_trends_section(c.get("trends") or {}))
    workers = v["workers"]["per_worker"]
    if workers:
        parts.append("<h3>Workers</h3>" + _table(["worker", "busy"], [[html.escape(k), _pct(s)]
                                                                      for k, s in workers.items()]))
    return "\n".join(parts)


def render_html(report: dict, figures: list[tuple[str, bytes]] = (), *, title: str = "lotus report") -> str:
    """The HTML page; ``figures``: (caption, PNG bytes) pairs, embedded as data URIs."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             f'<p class="muted">lotus {html.escape(report["lotus_version"])}'
             + (f' - {html.escape(report["data_dir"])}' if report.get("data_dir") else "") + "</p>",
             ]
    # a tune, stalls or sensitivity directory: the answer first, the probes (configs) below it
    from lotus.analysis.answers import sensitivity_section, stalls_section, tune_section

    answers = any(report.get(k) for k in ("tune", "stalls", "sensitivity"))
    if not answers:
        parts += ["<h2>Summary</h2>", _headline(report)]
    if report.get("tune"):
        parts.append(tune_section(report["tune"]))
    if report.get("stalls"):
        parts.append(stalls_section(report["stalls"]))
    if report.get("sensitivity"):
        parts.append(sensitivity_section(report["sensitivity"]))
    if answers and report["configs"]:
        parts += ["<h2>The probes</h2>", _headline(report)]
    for name, c in report["configs"].items():
        parts.append(_config_section(name, c))
    if figures:
        parts.append("<h2>Figures</h2>")
        for caption, png in figures:
            data = base64.b64encode(png).decode()
            parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _ranks_section(r: dict) -> str:
    """Stragglers across ranks and nodes (:func:`lotus.analysis.ranks.rank_report`)."""
    from lotus.analysis.htmlfmt import interval
    from lotus.analysis.ranks import straggler_text

    def rows(items, lead):
        return [[*lead(x), _fmt(x["samples_per_s"]),
                 interval(x.get("ci95") or ([x["ci95_lo"], x["ci95_hi"]] if x.get("ci95_lo") is not None else None)),
                 _pct(x["wait_share"]), html.escape(x["slowest_op"] or "-"), _pct(x["slowest_op_share"]),
                 _pct(x["worker_busy_share"]), _pct(x["gpu_data_idle_share"]), _pct(x["slowest_share"]),
                 _fmt(x["held_s"]), _fmt(x["held_input_s"]), _fmt(x["held_step_s"])] for x in items]

    head = ["samples/s", "95% CI", "loop waiting", "slowest op", "its share", "workers busy", "GPU idle (data)",
            "slowest at (steps)", "others waited (s)", "input", "step"]
    out = [f"<h3>Ranks and nodes</h3><p>{html.escape(straggler_text(r['straggler'], r['collective']))}.</p>"]
    if r["missing_ranks"]:
        out.append(f'<p class="muted">No trace files of rank(s) {", ".join(map(str, r["missing_ranks"]))} '
                   f'(world size {r["world_size"]}).</p>')
    out.append(_table(["rank", "node", *head],
                      rows(r["ranks"], lambda x: [str(x["rank"]), html.escape(str(x["node"]))])))
    if len(r["nodes"]) > 1:
        out.append(_table(["node", "ranks", *head], rows(r["nodes"], lambda x: [
            html.escape(str(x["node"])), html.escape(", ".join(map(str, x["ranks"])))])))
    return "\n".join(out)


def _trends_section(t: dict) -> str:
    """Per-epoch and per-bucket tables (only when there is more than one row to compare)."""
    out = []
    ep = t.get("per_epoch") or []
    if len(ep) > 1:
        out.append("<h3>Trend per epoch</h3>" + _table(
            ["epoch", "batches", "samples/s", "wait share", "slowest op", "its share"],
            [[str(r["epoch"]), _fmt(r["batches"]), _fmt(r["samples_per_s"]), _pct(r["wait_share"]),
              html.escape(r["slowest_op"] or "-"), _pct(r["slowest_op_share"])] for r in ep]))
    bk = t.get("per_bucket") or []
    if len(bk) > 1:
        unit = "h" if t["bucket_s"] == 3600 else "s"
        scale = 3600 if unit == "h" else 1
        out.append(f"<h3>Trend over time (buckets of {_fmt(t['bucket_s'])} s)</h3>" + _table(
            [f"from ({unit})", "batches", "samples/s", "wait share", "slowest op", "its share"],
            [[_fmt(r["start_s"] / scale), _fmt(r["batches"]), _fmt(r["samples_per_s"]), _pct(r["wait_share"]),
              html.escape(r.get("slowest_op") or "-"), _pct(r.get("slowest_op_share"))] for r in bk]))
    return "\n".join(out)


def write_report(configs, out_html: str | os.PathLike, *, remove_outliers: bool = False, figures: bool = True,
                 data_dir: str | None = None) -> tuple[Path, Path]:
    """Write the HTML report and ``report.json`` next to it; returns both paths."""
    from lotus.analysis.plots import all_figures

    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = build_report(configs, remove_outliers=remove_outliers, data_dir=data_dir)
    pngs = []
    if figures:
        for name, fig in all_figures(configs, remove_outliers=remove_outliers):
            pngs.append((name.replace("_", " "), figure_png(fig)))
            del fig  # drawn: the next is made without it (all_figures)
    out.write_text(render_html(report, pngs), encoding="utf-8")
    js = out.with_name("report.json") if out.name != "report.json" else out.with_suffix(".data.json")
    js.write_text(dumps(report), encoding="utf-8")
    return out, js
