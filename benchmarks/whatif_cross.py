"""`lotus whatif` across worker counts: every traced count predicts every other, against the job alone.

For one shape of ``benchmarks/corpus.py`` (same jobs, same CPUs): ``lotus run`` traces the job at each count of
``--traced``; the job alone (``benchmarks/reference_train.py`` under ``taskset``, no lotus) runs at each count of
``--workers``; ``lotus whatif`` from every trace predicts every count. The table is prediction against truth
(rows: the trace's count; columns: the predicted count), and the traces stay under ``--work/traced-W`` so a miss
can be taken apart term by term afterwards (``lotus whatif --json`` on them here).

    python benchmarks/whatif_cross.py --host gpu --data /tmp/jpegs --work W --shape short_epochs \\
        --traced 4,8 --workers 4,8,16 --seconds 15
    python benchmarks/whatif_cross.py --host local --work W --shape short_epochs --traced 2,4 --workers 1,2,4,8
    python benchmarks/whatif_cross.py --work W --rescore    # whatif again on W's traces with this checkout
    python benchmarks/whatif_cross.py --host gpu --work W --shape e32 --job "8:--synthetic 1 --samples 1024 -a none \
        -b 32 --step-ms 3" --traced 3,6 --workers 3,6,12     # a job that is not one of the corpus's shapes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import SHAPES, Corpus, bound_holds


def cross(c: Corpus, shape: str, traced: list[int], workers: list[int]) -> dict:
    cpus = SHAPES[c.a.host][shape][1]
    out = {"shape": shape, "cpus": cpus, "traced": {}, "truth": {}, "predictions": []}
    for w in workers:
        t = c.plain(shape, cpus, w)
        out["truth"][w] = None if t is None else {"samples_per_s": t["samples_per_s"], "ci95": t.get("ci95")}
    for tw in traced:
        run = c.work / f"traced-{shape}-w{tw}"
        if not (run / "own.json").exists() and c.late():
            continue
        if not c.trace(shape, tw, run):
            print(f"traced {shape} w{tw} failed", file=sys.stderr)
            continue
        own = json.loads((run / "own.json").read_text())
        out["traced"][tw] = {"own_samples_per_s": own.get("samples_per_s"), "own_ci95": own.get("ci95")}
        pts = [w for w in workers if w != tw] or workers
        pred, _, err = c.lotus(["whatif", "-d", str(run), "--workers", ",".join(map(str, pts)),
                                   "--cpus", str(cpus), "--json"], c.work / f"whatif-{shape}-w{tw}")
        if pred is None:
            print(f"whatif from w{tw} failed: {err}", file=sys.stderr)
            continue
        out["traced"][tw]["measured"] = pred.get("measured")
        for p in pred["predictions"]:
            t = out["truth"].get(p["num_workers"])
            truth = t and t["samples_per_s"]
            out["predictions"].append({"from": tw, "to": p["num_workers"], "lotus": p["samples_per_s"],
                                       "bound": p.get("bound"), "truth": truth,
                                       "error": p["samples_per_s"] / truth - 1 if truth else None})
    runs = [c.work / f"traced-{shape}-w{tw}" for tw in sorted(out["traced"], key=int)]
    if len(runs) >= 2:  # one model of every trace (lotus whatif -d A -d B): the counts none of them ran at
        pts = [w for w in workers if w not in out["traced"]]
        if pts:
            args = [x for r in runs for x in ("-d", str(r))]
            pred, _, err = c.lotus(["whatif", *args, "--workers", ",".join(map(str, pts)), "--cpus", str(cpus),
                                    "--json"], c.work / f"whatif-{shape}-joint")
            out["predictions"] += _joint(pred, out["truth"], sorted(out["traced"], key=int)) if pred else []
    return out


def _joint(pred: dict, truths: dict, traced: list) -> list[dict]:
    name = "+".join(str(t) for t in traced)
    rows = []
    for p in pred["predictions"]:
        t = truths.get(p["num_workers"]) or truths.get(str(p["num_workers"])) or {}
        truth = t.get("samples_per_s")
        rows.append({"from": name, "to": p["num_workers"], "lotus": p["samples_per_s"], "bound": p.get("bound"),
                     "truth": truth, "error": p["samples_per_s"] / truth - 1 if truth else None})
    return rows


def rescore(work: Path) -> list[dict]:
    """Every cross-*.json of ``work`` again with this checkout's lotus: whatif from its traces (``traced-*``,
    brought back from the device) against the truths measured with them."""
    out = []
    for f in sorted(work.glob("cross-*.json")):
        d = json.loads(f.read_text())
        d["predictions"] = []
        for tw in d["traced"]:
            pts = [int(w) for w in d["truth"] if int(w) != int(tw)]
            run = work / f"traced-{d['shape']}-w{tw}"
            if not pts or not run.is_dir():
                continue
            r = subprocess.run([sys.executable, "-m", "lotus", "whatif", "-d", str(run), "--workers",
                                ",".join(map(str, pts)), "--cpus", str(d["cpus"]), "--json"],
                               capture_output=True, text=True, check=False)
            for q in json.loads(r.stdout)["predictions"]:
                truth = (d["truth"].get(str(q["num_workers"])) or {}).get("samples_per_s")
                d["predictions"].append({"from": int(tw), "to": q["num_workers"], "lotus": q["samples_per_s"],
                                         "bound": q.get("bound"), "truth": truth,
                                         "error": q["samples_per_s"] / truth - 1 if truth else None})
        runs = [work / f"traced-{d['shape']}-w{tw}" for tw in sorted(d["traced"], key=int)]
        pts = [int(w) for w in d["truth"] if str(w) not in {str(t) for t in d["traced"]}]
        if len(runs) >= 2 and pts and all(r.is_dir() for r in runs):
            r = subprocess.run([sys.executable, "-m", "lotus", "whatif", *[x for q in runs for x in ("-d", str(q))],
                                "--workers", ",".join(map(str, pts)), "--cpus", str(d["cpus"]), "--json"],
                               capture_output=True, text=True, check=False)
            if r.returncode == 0:
                d["predictions"] += _joint(json.loads(r.stdout), d["truth"], sorted(d["traced"], key=int))
        out.append(d)
    return out


def _mark(p: dict) -> str:
    return {"upper": "<=", "lower": ">="}.get(p.get("bound") or "", "")


def bounds_held(points: list[dict], truths: dict) -> tuple[int, int, int]:
    """(bounds the truth kept, kept within the truth's own 95% interval, bounds with a truth): an upper bound
    holds where the truth is at most it. ``truths``: (shape, workers) -> the truth's record."""
    b = [p for p in points if bound_holds(p) is not None]
    ok = sum(bound_holds(p) for p in b)
    near = 0
    for p in b:  # the truth's interval end nearest the bound on its side
        ci = (truths.get((p["shape"], p["to"])) or {}).get("ci95") or [p["truth"], p["truth"]]
        near += bound_holds(p, ci[0] if p["bound"] == "upper" else ci[1])
    return ok, near, len(b)


def show(d: dict) -> str:
    lines = [f"{d['shape']} on {d['cpus']} CPUs: whatif from the trace at W (rows) to each count (columns), "
             "error against the job alone"]
    tos = sorted({p["to"] for p in d["predictions"]} | {int(k) for k in d["truth"]})
    def truth(w):
        return (d["truth"].get(w) or d["truth"].get(str(w)) or {}).get("samples_per_s") or 0

    lines.append("truth " + " ".join(f"{w}w={truth(w):,.0f}" for w in tos))
    for tw in sorted({p["from"] for p in d["predictions"]}, key=lambda f: (isinstance(f, str), str(f).zfill(4))):
        cells = {p["to"]: p for p in d["predictions"] if p["from"] == tw}
        lines.append(f"from {tw}w: " + "  ".join(
            f"{w}w {_mark(cells[w])}{cells[w]['lotus']:,.0f} ({100 * cells[w]['error']:+.1f}%)" if w in cells
            and cells[w]["error"]
            is not None else f"{w}w -" for w in tos))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", choices=sorted(SHAPES), default="local")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--files", type=Path, default=Path("/tmp/lotus-files"))
    p.add_argument("--shape", help="a shape of corpus.py (or --job)")
    p.add_argument("--traced", help="worker counts to trace, comma-separated")
    p.add_argument("--workers", help="worker counts to predict and run alone")
    p.add_argument("--rescore", action="store_true",
                   help="no runs: whatif again on --work's traces with this checkout, against their truths")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--deadline-s", type=float, default=1e9)
    p.add_argument("--job", default=None, metavar="CPUS:ARGS",
                   help="a shape not in corpus.py's list, named by --shape: its CPUs and reference_train.py's "
                        "arguments (one string, split on spaces), e.g. '8:--synthetic 1 --samples 1024 -b 32'")
    a = p.parse_args(argv)
    if a.rescore:
        errs, pts, truths = [], [], {}
        for d in rescore(a.work):
            print(show(d))
            errs += [abs(q["error"]) for q in d["predictions"] if q["error"] is not None]
            pts += [{**q, "shape": d["shape"]} for q in d["predictions"]]
            truths.update({(d["shape"], int(w)): t for w, t in d["truth"].items() if t})
        held, near, bounded = bounds_held(pts, truths)
        if bounded:
            print(f"bounds (<= at most, >= at least: time-slicing's cost not fitted): the truth kept {held} of "
                  f"{bounded}, {near} of {bounded} within the truth's own 95% interval")
        if errs:
            errs.sort()
            print(f"{len(errs)} points: median |error| {100 * errs[len(errs) // 2]:.1f}%, worst {100 * errs[-1]:.1f}%, "
                  f"within 10%: {sum(e <= 0.1 for e in errs)}")
        return 0
    if not (a.shape and a.traced and a.workers):
        p.error("--shape, --traced and --workers (or --rescore)")
    if a.job:
        cpus, args = a.job.split(":", 1)
        SHAPES[a.host][a.shape] = (args.split(), int(cpus), 0, [], [], "--job " + a.job)
    a.work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    d = cross(Corpus(a), a.shape, [int(x) for x in a.traced.split(",")], [int(x) for x in a.workers.split(",")])
    d["seconds"] = time.monotonic() - t0
    (a.work / f"cross-{a.shape}.json").write_text(json.dumps(d, indent=1))
    print(show(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
