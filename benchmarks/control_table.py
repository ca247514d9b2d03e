"""The table of benchmarks/device_control.sh's rounds: tune's choice and intervals against the job alone.

    python benchmarks/control_table.py docs/results/gpu-h200/issue-24/control/round*
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def _alone(d: Path, when: str, w: int) -> float | None:
    f = next(d.glob(f"r*-{when}-w{w}.json"), None)
    return json.loads(f.read_text())["samples_per_s"] if f else None


def _inside(v, ci) -> str:
    return "-" if v is None or not ci else ("yes" if ci[0] <= v <= ci[1] else "NO")


def _pooled(c: dict) -> str:
    ci = c.get("pooled_ci95")
    return f"{c['pooled_samples_per_s']:,.0f} ({ci[0]:,.0f}-{ci[1]:,.0f})" if ci else "-"


def _at(v, ci) -> str:
    return "-" if v is None else f"{v:,.0f} ({_inside(v, ci)})"


def main(dirs: list[str]) -> None:
    print("| round | tune s | chosen | tune's rate (95% CI) | alone at chosen | alone best (w) | chosen/best | "
          "baseline 16w (95% CI) | alone 16w mean | control: setting, drift, apart | control's pooled rate (95% CI) "
          "| alone at its setting |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    spread: dict[int, list[float]] = {}
    for d in map(Path, dirs):
        f = next(d.glob("tune-r*.json"), None)
        if f is None:  # the call brought back the job alone's runs only
            for x in (4, 16):
                spread.setdefault(x, []).extend(v for when in ("before", "after") if (v := _alone(d, when, x)))
            print(f"| {d.name} | (tune's JSON not brought back: the job alone's runs only) |" + " |" * 10)
            continue
        t = json.loads(f.read_text())
        w = int(t["best"]["num_workers"])
        c = t.get("control") or {}
        cw = int(m.group(1)) if (m := re.match(r"num_workers=(\d+)", c.get("setting") or "")) else None
        alone = {x: [v for when in ("before", "after") if (v := _alone(d, when, x)) is not None]
                 for x in {4, 16, w} | ({cw} if cw else set())}
        for x in (4, 16):
            spread.setdefault(x, []).extend(alone[x])
        mean = {x: statistics.mean(v) for x, v in alone.items() if v}
        best_w = max(mean, key=mean.get)
        ci, bci = t["ci95"], t["baseline_ci95"]
        print(f"| {d.name} | {t['seconds']:.0f} | {w} | {t['samples_per_s']:,.0f} ({ci[0]:,.0f}-{ci[1]:,.0f}) | "
              f"{mean[w]:,.0f} ({_inside(mean[w], ci)}) | {mean[best_w]:,.0f} ({best_w}) | "
              f"{mean[w] / mean[best_w] - 1:+.1%} | {t['baseline_samples_per_s']:,.0f} ({bci[0]:,.0f}-{bci[1]:,.0f}) | "
              f"{mean[16]:,.0f} ({_inside(mean[16], bci)}) | {c.get('setting')}, {c.get('drift', 0):+.1%}, "
              f"{c.get('apart')} | {_pooled(c)} | {_at(mean.get(cw), c.get('pooled_ci95'))} |")
    for x, v in spread.items():
        print(f"job alone at {x} workers, {len(v)} runs: mean {statistics.mean(v):,.1f}, sd "
              f"{statistics.stdev(v) / statistics.mean(v):.1%}, range {min(v):,.0f}-{max(v):,.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
