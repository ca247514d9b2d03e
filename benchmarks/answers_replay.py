"""Replay lotus's decision commands on probes recorded on the GPU host (issue 24): no GPU, no job.

``benchmarks/device_answers.sh grid`` traces the ResNet-18 JPEG job (plain torch timing its own steady state)
at CPU x worker points; this script hands those traces to ``lotus.profile.sensitivity`` in place of the
launcher (:class:`Replay`: a probe of C CPUs and W workers gets the recorded run of C CPUs with the nearest
worker count), then scores every cell of the matrix against the job's own clock: the best rate recorded at
that CPU count.

    python benchmarks/answers_replay.py --grid /tmp/d1/grid --cpus 1,2,4,8,12,16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path


class Replay:
    """A stand-in for :func:`lotus.launch.launch` serving recorded runs ``c<C>-w<W>`` of a grid directory."""

    def __init__(self, grid: Path):
        self.runs: dict[tuple[int, int], Path] = {}
        for d in sorted(Path(grid).iterdir()):
            m = re.fullmatch(r"c(\d+)-w(\d+)", d.name)
            if m and d.is_dir():
                self.runs[(int(m.group(1)), int(m.group(2)))] = d
        self.served: list[dict] = []

    def nearest(self, cpus: int, workers: int | None) -> tuple[int, int]:
        at = [k for k in self.runs if k[0] == cpus] or list(self.runs)
        return min(at, key=lambda k: (abs(k[0] - cpus), abs(k[1] - (workers if workers is not None else k[1]))))

    def __call__(self, command, options):
        from lotus.launch.runner import Probe

        cpus = len(options.cpus) if options.cpus else max(c for c, _ in self.runs)
        key = self.nearest(cpus, options.workers)
        dest = Path(options.trace_dir)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.runs[key], dest)
        self.served.append({"asked": [cpus, options.workers], "served": list(key)})
        return Probe(list(command), dest, 0, wall_s=30.0, cpus=options.cpus, workers=key[1])

    def truth(self) -> dict[int, float]:
        """The job's own clock: the best rate recorded at each CPU count (own.json of reference_train.py)."""
        best: dict[int, float] = {}
        for (c, _w), d in self.runs.items():
            own = json.loads((d / "own.json").read_text()).get("samples_per_s")
            if own:
                best[c] = max(best.get(c, 0.0), own)
        return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", type=Path, required=True)
    p.add_argument("--cpus", default="1,2,4,8,12,16")
    p.add_argument("--max-probes", type=int, default=6)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    from lotus.profile.sensitivity import sensitivity

    replay = Replay(a.grid)
    truth = replay.truth()
    grid = [int(c) for c in a.cpus.split(",")]
    import os

    if len(os.sched_getaffinity(0)) < max(grid):  # the replay needs no CPUs: pretend the host's
        os.sched_getaffinity = lambda _pid: set(range(max(grid)))
    with tempfile.TemporaryDirectory() as tmp:
        prof = sensitivity(["job"], Path(tmp) / "s", cpus_grid=grid, max_probes=a.max_probes, launcher=replay)
    rows = []
    for q in prof.matrix:
        t = truth.get(q.cpus)
        rows.append({"cpus": q.cpus, "how": q.how, "lotus": q.samples_per_s, "workers": q.num_workers,
                     "pi95": q.pi95, "ci95": q.ci95, "truth": t, "error": q.samples_per_s / t - 1 if t else None})
        print(f"{q.cpus:3d} CPUs {q.how:12s} w{q.num_workers!s:>3} {q.samples_per_s:9.1f} truth {t or 0:9.1f} "
              f"{(q.samples_per_s / t - 1) if t else 0:+7.1%}")
    errs = sorted(abs(r["error"]) for r in rows if r["error"] is not None)
    print(f"median |error| {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%}; demand {prof.demand}")
    for pr in prof.probes:
        print(f"  probe {pr['name']:16s} w{pr['num_workers']!s:>3} {pr['samples_per_s']:9.1f} predicted before "
              f"{pr.get('predicted_before') or 0:9.1f}")
    for n in prof.notes:
        print("  note:", n)
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "profile": prof.to_dict(), "served": replay.served,
                                      "truth": truth}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
