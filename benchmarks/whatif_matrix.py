"""whatif across worker counts, every traced run against every other: a matrix of errors against the job alone.

A directory of traced runs of one job at several worker counts (``w<N>/``, each a ``lotus run -o`` directory
with the job's own clock ``own.json`` in it: ``benchmarks/reference_train.py --json``), on the same CPUs.
Each run's model predicts every worker count; the error is against that count's own clock (not lotus
against lotus: the job times its own steady state). ``--joint`` also fits pairs/triples of runs together
(``lotus whatif -d A -d B``) and scores the counts not in the fit. ``<`` / ``>``: the prediction is an upper /
lower bound (time-slicing not fitted).

    tar -xzf docs/results/gpu-h200/issue-24/short-epochs/traces.tgz -C /tmp
    python benchmarks/whatif_matrix.py /tmp/se --cpus 8 --joint 8,11 8,14 8,11,14 8,14,16 7,8 4,8 8,16 2,14
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="a directory of w<N>/ traced runs")
    p.add_argument("--cpus", type=float, required=True, help="the CPUs the runs had")
    p.add_argument("--joint", nargs="*", default=[], metavar="N,M", help="worker counts fitted together")
    p.add_argument("--truth", type=Path, default=None, metavar="DIR",
                   help="the job alone's clock from DIR/w<N>*.json instead (reference_train.py --json; several "
                        "files of a count: their mean), e.g. runs with --whole-epochs")
    a = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    warnings.filterwarnings("ignore")
    import numpy as np

    from lotus.model import fit

    runs = {int(m.group(1)): d for d in a.root.iterdir() if (m := re.fullmatch(r"w(\d+)", d.name)) and d.is_dir()}
    counts = sorted(runs)
    truth = {w: json.loads((runs[w] / "own.json").read_text())["samples_per_s"] for w in counts}
    if a.truth is not None:
        for w in counts:
            got = [json.loads(f.read_text())["samples_per_s"] for f in sorted(a.truth.glob(f"w{w}.json"))
                   + sorted(a.truth.glob(f"w{w}-*.json"))]
            truth[w] = float(np.mean(got)) if got else truth[w]
    print("truth (the job's own clock, samples/s): " + ", ".join(f"{w}: {truth[w]:,.0f}" for w in counts))

    def row(model) -> dict[int, tuple[float, str]]:
        out = {}
        for w in counts:
            pr = model.predict(num_workers=w, cpus=a.cpus)
            out[w] = (pr.samples_per_s / truth[w] - 1, {"upper": "<", "lower": ">"}.get(pr.bound or "", " "))
        return out

    def score(errs: list[float], what: str) -> None:
        e = np.abs(np.array(errs))
        print(f"{what}: median |error| {np.median(e):.1%}; within 10%: {(e <= 0.10).sum()} of {len(e)}; "
              f"within 25%: {(e <= 0.25).sum()}")

    print("from\\to " + " ".join(f"{w:>7d}" for w in counts))
    errs = []
    for src in counts:
        r = row(fit(str(runs[src])))
        errs += [e for w, (e, _) in r.items() if w != src]
        print(f"{src:7d} " + " ".join(f"{e:+7.0%}{b}" for e, b in r.values()))
    score(errs, "single traces, the other counts")
    joint = []
    for spec in a.joint:
        ws = [int(x) for x in spec.split(",")]
        r = row(fit([str(runs[w]) for w in ws]))
        joint += [e for w, (e, _) in r.items() if w not in ws]
        print(f"joint {spec:>10}: " + " ".join(f"{w}:{e:+.0%}{b.strip()}" for w, (e, b) in r.items()))
    if joint:
        score(joint, "joint fits, the counts not fitted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
