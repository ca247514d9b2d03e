"""The ``lotus top`` table: a rich renderable of one snapshot (see docs/top.md for the columns)."""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

COLUMNS = ("loader", "epoch", "samples/s", "wait", "GPU idle", "queue", "in flight", "busy", "slowest op")
_FLEX = ("loader", "slowest op")  # the columns that give way (ellipsis) on a narrow terminal


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _op(op: dict | None) -> str:
    if not op:
        return "-"
    share = op.get("share_of_fetch")
    return f"{op['name']} {op['mean_ms']:.3g} ms" + ("" if share is None else f" ({_pct(share)})")


def _worker(w: int) -> str:
    return "main" if w < 0 else f"w{w}"


def header_line(snap: dict) -> Text:
    job = snap.get("job") or {}
    files = snap["files"]
    state = "live" if snap.get("live") else "not running"
    text = Text()
    text.append("lotus top ", style="bold")
    text.append(f"{snap.get('run_dir', '')}  ")
    text.append(f"job {state}", style="green" if snap.get("live") else "yellow")
    if job.get("reason"):
        text.append(f" ({job['reason']})")
    text.append(f"  files {files['total']} ({files['open']} open)  window {snap['window_s']:g} s  "
                f"{time.strftime('%H:%M:%S')}")
    return text


def table(snap: dict) -> Table:
    t = Table(box=None, pad_edge=False, collapse_padding=True, header_style="bold")
    for c in COLUMNS:
        flex = c in _FLEX
        t.add_column(c, justify="left" if flex else "right", no_wrap=True, overflow="ellipsis",
                     min_width=None if flex else len(c), ratio=1 if flex else None)
    for ld in snap["loaders"]:
        busy = [w["busy_share"] for w in ld["workers"] if w["busy_share"] is not None]
        t.add_row(f"r{ld['rank']}:{ld['loader']} {ld['name']}", "-" if ld["epoch"] is None else str(ld["epoch"]),
                  _num(ld["samples_per_s"]), _pct(ld["wait_share"]), _pct(ld["gpu_idle_share"]),
                  str(ld["queue_depth"]), str(ld["in_flight"]), _pct(sum(busy) / len(busy) if busy else None),
                  _op(ld["slowest_op"]), style="bold")
        for w in ld["workers"]:
            t.add_row(f"  {_worker(w['worker'])}", "", "", "", "", "", str(w["in_flight"]), _pct(w["busy_share"]), "")
    return t


def render(snap: dict) -> Group:
    """Header line, the table, and a note when there is nothing to show yet."""
    parts = [header_line(snap)]
    if snap["loaders"]:
        parts.append(table(snap))
    elif snap["files"]["total"] == 0:
        parts.append(Text("waiting for trace files...", style="dim"))
    else:
        parts.append(Text("no DataLoader events yet...", style="dim"))
    return Group(*parts)
