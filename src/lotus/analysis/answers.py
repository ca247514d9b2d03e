"""The report's answer sections for a ``lotus tune``, ``lotus stalls`` or ``lotus sensitivity`` directory:
the answer (recommended settings, stall split, matrix and demand, each with its intervals) above the
probes, every probe with its 95% interval and why it ended, and each failed probe's stderr tail."""

from __future__ import annotations

import base64
import html

from lotus.analysis.htmlfmt import failed_probes, figure_png, fmt, interval, pct, table
from lotus.analysis.steady import ended_by


def _rate(v, ci) -> str:
    """'1,234 samples/s (95% CI 1,200-1,270)'."""
    if v is None:
        return "-"
    return f"{fmt(v)} samples/s" + (f" (95% CI {fmt(ci[0])}-{fmt(ci[1])})" if ci else " (no interval)")


def _share_ci(share, ci) -> str:
    return pct(share) + (f" ({pct(ci[0])}-{pct(ci[1])})" if ci else "")


def _notes(notes) -> str:
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes or [])
    return f'<ul class="muted">{items}</ul>' if items else ""


def _ended(p: dict) -> str:
    return html.escape(ended_by(p.get("stopped_by"), p.get("exit_code")))


def tune_section(d: dict) -> str:
    best, own = d.get("best") or {}, d.get("baseline") or {}
    gain = f" ({d['gain']:.2f}x the job's own settings)" if d.get("gain") else ""
    head = (f"<p>Recommended: <code>{html.escape(d.get('snippet') or '')}</code></p>"
            f"<p>Measured with it: <b>{html.escape(_rate(d.get('samples_per_s'), d.get('ci95')))}</b>{gain}; "
            f"with the job's own settings ({html.escape(', '.join(f'{k}={v}' for k, v in own.items()))}): "
            f"{html.escape(_rate(d.get('baseline_samples_per_s'), d.get('baseline_ci95')))}.</p>")
    if d.get("predicted_samples_per_s"):
        head += (f"<p class='muted'>The model predicts {fmt(d['predicted_samples_per_s'])} samples/s at "
                 f"num_workers={best.get('num_workers')}; search: {html.escape(d.get('stopped') or '')}.</p>")
    probes = d.get("probes") or []
    rows = [[html.escape(p["name"]), str(p["settings"].get("num_workers")), str(p["settings"].get("prefetch_factor")),
             str(p["settings"].get("pin_memory")), str(p["settings"].get("persistent_workers")),
             f"FAILED ({p.get('exit_code')})" if p["failed"] else fmt(p.get("samples_per_s")), interval(p.get("ci95")),
             fmt(p.get("predicted_samples_per_s")),
             "failed" if p["failed"] else _ended(p), html.escape(p.get("note") or "")]
            for p in probes]
    return ("<h2>Recommended DataLoader settings (lotus tune)</h2>" + head + _notes(d.get("notes"))
            + "<h3>Probes</h3>" + table(["probe", "workers", "prefetch", "pin", "persistent", "samples/s", "95% CI",
                                         "predicted", "ended by", "note"], rows)
            + failed_probes([p for p in probes if p["failed"]]))


def stalls_section(d: dict) -> str:
    rows = [[k.replace("_", " "), fmt(d.get(f"{k}_ms")), _share_ci(d.get(f"{k}_share"), d.get(f"{k}_share_ci95"))]
            for k in ("compute", "loop_overhead", "prep_stall", "fetch_stall") if k != "loop_overhead"
            or d.get("loop_overhead_ms") is not None]
    rates = (f"ingestion {_rate(d.get('ingestion_samples_per_s'), d.get('ingestion_ci95'))}; warm cache "
             f"{_rate(d.get('prep_samples_per_s'), d.get('prep_ci95'))}; cold cache "
             f"{_rate(d.get('fetch_samples_per_s'), d.get('fetch_ci95'))}")
    check = ""
    if d.get("stall_source") == "measured wait":
        check = (f"<p class='muted'>Prep stall: the loop's measured wait in the warm run "
                 f"({pct(d['warm_measured_wait_share'])}); DS-Analyzer's differential analysis would say "
                 f"{pct(d.get('differential_stall_share'))}.</p>")
    probes = list((d.get("probes") or {}).values())
    prows = [[html.escape(p["name"]), f"FAILED ({p['exit_code']})" if p["exit_code"] else fmt(p.get("samples_per_s")),
              interval(p.get("ci95")), fmt(p.get("wall_s")), _ended(p)] for p in probes]
    return ("<h2>Data stalls (lotus stalls)</h2>"
            + table([f"per iteration of {d.get('batch_size')} samples", "ms", "share (95% CI)"], rows)
            + f'<p>{html.escape(rates)}</p>' + check + _notes(d.get("notes"))
            + ("<h3>Probes</h3>" + table(["probe", "samples/s", "95% CI", "wall s", "ended by"], prows)
               if probes else "")
            + failed_probes([p for p in probes if p["exit_code"]]))


def _measured_cell(r: dict) -> str:
    """'yes (99.3-105, warm)'; empty for a predicted point."""
    if not r["measured"]:
        return ""
    parts = [interval(r["ci95"])] if r.get("ci95") else []
    parts.append(html.escape(str(r.get("cache_state") or "-")))
    if r.get("stopped_by") or r.get("probe"):
        parts.append(f"ended by: {_ended(r)}")
    model = r.get("model_num_workers")
    if model is not None and model != r.get("num_workers"):
        parts.append(f"model's best {model} workers: {fmt(r.get('predicted_samples_per_s'))}")
    return "yes (" + ", ".join(parts) + ")"


def sensitivity_section(d: dict) -> str:
    rows = sorted(d.get("matrix") or [], key=lambda r: (r["cache_gb"], r["cpus"]))
    matrix = table(["page cache (GB)", "CPUs", "workers", "samples/s", "measured (95% CI, cache as run, ended by)",
                    "bottleneck"],
                   [[fmt(r["cache_gb"]), str(r["cpus"]), str(r.get("num_workers", "-")), fmt(r["samples_per_s"]),
                     _measured_cell(r), html.escape(str(r.get("bottleneck") or ""))] for r in rows])
    dem = d.get("demand")
    head = ""
    if dem:
        rate = _rate(dem["samples_per_s"], dem.get("ci95")) if dem.get("measured") else \
            f"{fmt(dem['samples_per_s'])} samples/s"
        share = dem.get("share_of_best")  # directories of lotus before it: from the two rates
        if share is None and dem.get("best_samples_per_s"):
            share = dem["samples_per_s"] / dem["best_samples_per_s"]
        head = (f"<p>Demand: <b>{dem['cpus']} CPUs</b> ({dem.get('num_workers', '-')} workers) and "
                f"<b>{fmt(dem['cache_gb'])} GB</b> of page cache reach {html.escape(rate)} "
                f"({pct(share)} of the best, {fmt(dem.get('best_samples_per_s'))}; target {pct(d.get('target'))}; "
                f"{'measured' if dem.get('measured') else 'predicted'}).</p>")
    head += _notes(d.get("notes"))
    img = ""
    try:
        from lotus.analysis.profiles import sensitivity_frame, sensitivity_heatmap

        png = figure_png(sensitivity_heatmap(sensitivity_frame(d.get("matrix") or []), demand=dem))
        img = f'<figure><img alt="sensitivity" src="data:image/png;base64,{base64.b64encode(png).decode()}"></figure>'
    except Exception:  # a figure must never cost the report
        img = ""
    probes = d.get("probes") or []
    prows = [[html.escape(p["name"]), str(p["cpus"]), str(p.get("num_workers")),
              f"FAILED ({p['exit_code']})" if p["exit_code"] else fmt(p.get("samples_per_s")), interval(p.get("ci95")),
              html.escape(str(p.get("cache_state") or "-")), _ended(p)] for p in probes]
    return ("<h2>CPU and memory sensitivity (lotus sensitivity)</h2>" + head + img + matrix
            + ("<h3>Probes</h3>" + table(["probe", "CPUs", "workers", "samples/s", "95% CI", "page cache", "ended by"],
                                         prows) if probes else "")
            + failed_probes([p for p in probes if p["exit_code"]]))
