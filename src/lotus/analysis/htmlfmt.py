"""Small HTML pieces shared by the report's sections: numbers, shares, tables, embedded figures."""

from __future__ import annotations

import html
import io


def figure_png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def fmt(v, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return html.escape(str(v))


def pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def interval(ci) -> str:
    """'1,200-1,270' (escaped-safe), '-' without an interval."""
    return f"{fmt(ci[0])}-{fmt(ci[1])}" if ci else "-"


def failed_probes(probes: list[dict], n: int = 15) -> str:
    """The stderr tail of each of these failed probes (``name``, ``exit_code``, ``stderr_tail``), preformatted."""
    out = []
    for p in probes:
        tail = "\n".join((p.get("stderr_tail") or "").strip().splitlines()[-n:]) or "(nothing on stderr)"
        out.append(f"<p>{html.escape(str(p.get('name')))} failed (exit code {html.escape(str(p.get('exit_code')))}); "
                   f"its stderr ends with:</p><pre>{html.escape(tail)}</pre>")
    return "".join(out)
