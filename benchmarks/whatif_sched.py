"""whatif with and without the scheduler's view, on traced runs (format >= 4), against the job's own clock.

For each RUN (a ``lotus run`` directory), the model fitted with the traces' run-queue delays and CPU times
(``sched``, lotus's default) and without them (``assumed``: the CPU model's assumptions, as for traces of
format <= 3) predicts the samples/s at each of ``--workers``; with ``--truth DIR`` (files
``SHAPE-cC-wW.json`` of ``benchmarks/reference_train.py --json``, as ``benchmarks/corpus.py`` writes them)
each prediction is set against the job alone at that setting.

    python benchmarks/whatif_sched.py --run cpu_decode=W/traced/cpu_decode --cpus 16 --workers 8,32 \\
        --truth W/truth --json out.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def compare(run: str, cpus: float, workers: list[int]) -> dict:
    from lotus.model.fitting import MODEL_COLUMNS, fit, load_run

    r = load_run(run, columns=MODEL_COLUMNS)
    models = {"sched": fit(r), "assumed": fit(r, sched=False)}
    m = models["sched"]
    out = {"cpu_capacity": m.cpu_capacity, "main_cpu_cores": m.main_cpu_cores, "main_measured": m.main_cpu_measured,
           "cpu_fraction": m.cpu_fraction, "contention": {k: v.contention for k, v in models.items()},
           "traced": {"workers": m.traced.num_workers, "samples_per_s": m.traced.samples_per_s,
                      "ci95": m.traced.samples_per_s_ci95},
           "notes": [n for n in m.notes if n.startswith("the scheduler")], "points": []}
    for w in workers:
        out["points"].append({"workers": w, **{k: v.predict(w, cpus).samples_per_s for k, v in models.items()}})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", required=True, help="SHAPE=RUN_DIR (repeatable)")
    p.add_argument("--cpus", type=float, required=True)
    p.add_argument("--workers", required=True, help="comma-separated worker counts")
    p.add_argument("--truth", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    ws = [int(x) for x in a.workers.split(",")]
    rows = {}
    for spec in a.run:
        shape, run = spec.split("=", 1)
        d = compare(run, a.cpus, ws)
        for pt in d["points"]:
            f = a.truth / f"{shape}-c{int(a.cpus)}-w{pt['workers']}.json" if a.truth else None
            if f is not None and f.exists():
                t = json.loads(f.read_text())
                pt["truth"], pt["truth_ci95"] = t["samples_per_s"], t.get("ci95")
                for k in ("sched", "assumed"):
                    pt[f"{k}_error"] = pt[k] / t["samples_per_s"] - 1 if pt[k] else None
        rows[shape] = d
        print(f"{shape}: capacity {d['cpu_capacity']:.2f}, main {d['main_cpu_cores']:.2f} CPUs, "
              f"cpu fraction {d['cpu_fraction']:.2f}; traced {d['traced']['workers']}w "
              f"{d['traced']['samples_per_s'] or 0:,.0f}/s")
        for pt in d["points"]:
            tail = (f"  truth {pt['truth']:,.0f}: sched {pt['sched_error']:+.1%}, assumed {pt['assumed_error']:+.1%}"
                    if "truth" in pt else "")
            print(f"  {pt['workers']:>3}w  sched {pt['sched'] or 0:>9,.0f}  assumed {pt['assumed'] or 0:>9,.0f}{tail}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
