"""Issue 24's corpus: each job shape x each decision command, against the job's own clock.

Every shape is a run of ``benchmarks/reference_train.py`` (plain torch, no lotus import, timing its own steady
state after the prefetched ramp: over whole epochs, each with its restart; ``LOTUS_TRUTH_EPOCHS=0`` for its
fixed window). For each (shape, command) the command runs as a user would run it, and the
same job runs alone (``taskset``, no lotus) at the points the command speaks of, in the same session:

- ``whatif``: ``lotus run`` traces the shape at its own setting; ``lotus whatif`` predicts half and twice its
  workers (2 and 8 from ``num_workers=0``); truth: the job alone at those settings.
- ``stalls``: ``lotus stalls`` (its warm prep-stall share) against the loop's measured wait share of the job
  alone at its own setting (points).
- ``tune``: ``lotus tune --only num_workers`` from the shape's setting; truth: the job alone at every
  worker count of the shape's sweep; error = the job alone at tune's choice against the sweep's best; time =
  tune's seconds against the sweep's (the sum of its runs' wall times). The table adds tune's share of a sweep
  of EVERY count from the grid's least to its most, projected (one grid-mean run a count; not measured, and
  its best not known: the error stays against the grid's best).
  ``tunep``: the same with ``--process-per-probe`` (every probe a process of its own; ``tune`` runs its
  probes in the job's one process since 2026-11-28), the same truths.
- ``sens``: ``lotus sensitivity --cpus-grid G``; truth: the job alone at each CPU count of G with the best of
  a few worker counts; error per cell (the warm column) and the demand (fewest CPUs of G reaching 95% of
  the best) against the truth's demand.

Every step saves its JSON under ``--work`` and is skipped when rerun (phases resume across device calls);
``--deadline-s`` stops starting new steps. ``--table FILE`` writes the markdown table from what is there.
Truths and traces are reused only on the machine (the boot, :func:`machine`) that made them: a resumed call on
another machine measures them again, so that a row never compares lotus on one machine with the job alone on
another (the GPU host's machines differ in level by up to 28% at one cell).

    python benchmarks/corpus.py --host local --work /tmp/corpus --seconds 6            # this machine
    python benchmarks/corpus.py --host gpu --data /tmp/jpegs --work W --shapes gpu_bound --commands whatif,stalls
    python benchmarks/corpus.py --work W --table table.md
    python benchmarks/corpus.py --work "H200=W1,2-core VM=W2" --table docs/results/corpus.md    # one table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = [sys.executable, str(REPO / "benchmarks" / "reference_train.py")]
JPEG = ["-b", "128", "--bf16", "--channels-last", "--pin-memory", "--persistent-workers"]
IO = ["--make-files", "8192", "256", "--synthetic", "1", "-a", "none", "--step-ms", "1", "-b", "16",
      "--persistent-workers"]

# name: (job args with {data}, cpus, workers, tune sweep, sensitivity grid, what it stands for)
SHAPES = {
    "gpu": {
        "cpu_decode": (["{data}", "-a", "resnet18", *JPEG], 16, 16, [8, 12, 16, 20, 24], [2, 4, 8, 16],
                       "ResNet-18 on JPEGs: CPU-decode-bound"),
        "gpu_bound": (["{data}", "-a", "resnet152", *JPEG], 16, 16, [4, 8, 12, 16], [2, 4, 8, 16],
                      "ResNet-152 on JPEGs: GPU-bound"),
        "nw0": (["{data}", "-a", "resnet18", *JPEG], 8, 0, [0, 2, 4, 6, 8, 12], [2, 4, 8],
                "ResNet-18, launched with num_workers=0, 8 CPUs"),
        "oversub": (["{data}", "-a", "resnet18", *JPEG], 4, 16, [2, 4, 8, 16, 32], [1, 2, 4],
                    "ResNet-18, 16 workers on 4 CPUs"),
        "tokenizer": (["--synthetic", "0.05", "--samples", "65536", "-a", "none", "--step-ms", "2", "-b", "256",
                       "--persistent-workers"], 4, 4, [1, 2, 4, 8], [1, 2, 4],
                      "light per-sample Python (0.05 ms/sample, batch 256), 2 ms CPU step"),
        "short_epochs": (["--synthetic", "2", "--samples", "512", "-a", "none", "--step-ms", "5", "-b", "32"],
                         8, 8, [2, 4, 8, 12, 16], [2, 4, 8],
                         "16-batch epochs, 8 workers not persistent: epochs shorter than the ramp"),
        # 8 GiB: more than a run reads of a disk that gives ~520 MB/s cold (no throttle there: no io controller);
        # run under benchmarks/slowdisk.sh DIR 0 MEM (a page cache smaller than the dataset)
        "io_bound": (["--files", "{files}", "--make-files", "8192", "1024", "--synthetic", "0.2", "-a", "none",
                      "--step-ms", "1", "-b", "16", "--persistent-workers"], 8, 4, [1, 2, 4, 8, 16], [1, 2, 4, 8],
                     "8,192 files of 1 MiB read whole + 0.2 ms CPU each, 1 ms step: I/O-bound"),
    },
    "local": {
        "cpu_bound": (["--synthetic", "4", "--samples", "4096", "-a", "none", "--step-ms", "1", "-b", "16",
                       "--persistent-workers"], 2, 2, [1, 2, 3, 4], [1, 2],
                      "4 ms of CPU per sample, 1 ms step: CPU-bound"),
        "step_bound": (["--synthetic", "1", "--samples", "4096", "-a", "none", "--step-ms", "40", "-b", "16",
                        "--persistent-workers"], 2, 2, [1, 2, 4], [1, 2],
                       "40 ms step per batch of 1 ms samples: step-bound (the GPU-bound analogue)"),
        "nw0": (["--synthetic", "4", "--samples", "4096", "-a", "none", "--step-ms", "1", "-b", "16"], 2, 0,
                [0, 1, 2, 3], [1, 2], "launched with num_workers=0"),
        "oversub": (["--synthetic", "4", "--samples", "4096", "-a", "none", "--step-ms", "1", "-b", "16",
                     "--persistent-workers"], 2, 8, [1, 2, 4, 8], [1, 2], "8 workers on 2 CPUs"),
        "tokenizer": (["--synthetic", "0.05", "--samples", "65536", "-a", "none", "--step-ms", "2", "-b", "256",
                       "--persistent-workers"], 2, 2, [1, 2, 4], [1, 2], "0.05 ms/sample, batch 256"),
        "short_epochs": (["--synthetic", "2", "--samples", "256", "-a", "none", "--step-ms", "2", "-b", "16"],
                         2, 4, [1, 2, 4, 8], [1, 2], "16-batch epochs, 4 workers not persistent"),
        # run under benchmarks/slowdisk.sh (a throttled disk and a page cache smaller than the dataset)
        "io_bound": (["--files", "{files}", *IO], 2, 2, [1, 2, 4, 8], [1, 2],
                     "8,192 files of 256 KiB read whole + 1 ms CPU each, 1 ms step: I/O-bound"),
    },
}
COMMANDS = ("whatif", "stalls", "tune", "sens")


def machine() -> str:
    """This machine's boot: its host name and the kernel's boot id. The GPU host is lent a machine at a time, and
    two machines' levels differ by more than any target here (the oversub cell's job alone: 829 and 1,059 samples/s
    on two machines of one session, docs/results/gpu-h200/issue-24/control/): a truth or a trace is used only on the
    boot that made it (:meth:`Corpus.mine`); one of another boot (or of none: made before 2026-11-30) is set aside
    and measured again."""
    import socket

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


class Corpus:
    def __init__(self, a):
        self.a, self.work, self.t0 = a, Path(a.work), time.monotonic()
        self.shapes = SHAPES[a.host]
        self.machine = machine()

    def mine(self, made_on: str | None, f: Path) -> bool:
        """Whether what ``f`` holds was made on this boot (:func:`machine`); if not, ``f`` is set aside
        (``.other-machine`` after its name) so that it is measured again here."""
        if made_on == self.machine:
            return True
        aside = f.with_name(f.name + ".other-machine")
        if aside.is_dir():
            import shutil

            shutil.rmtree(aside)
        f.replace(aside)
        print(f"{f.name}: made on {made_on or 'an unrecorded machine'}, not this one ({self.machine}): measured "
              f"again", flush=True)
        return False

    def late(self) -> bool:
        return time.monotonic() - self.t0 > self.a.deadline_s

    def args(self, shape: str, workers: int, seconds: float | None = None) -> list[str]:
        spec = self.shapes[shape]
        job = [str(self.a.data) if x == "{data}" else str(self.a.files) if x == "{files}" else x for x in spec[0]]
        return [*JOB, *job, "-j", str(workers), "--seconds", str(seconds or self.a.seconds)]

    @staticmethod
    def whole_epochs() -> bool:
        """The job alone's truth is its rate over whole epochs (reference_train.py --whole-epochs), kept in truth
        files of their own (``-e`` before ``.json``); ``$LOTUS_TRUTH_EPOCHS=0``: its fixed 8-s window after the
        ramp instead (the default before 2026-11-29, late). Whole epochs since: the window holds no epoch restart
        or one, where a long run pays every one: the gpu_bound job's window read 7-12% above its whole epochs
        (docs/results/gpu-h200/issue-24/probe-gap/)."""
        return os.environ.get("LOTUS_TRUTH_EPOCHS", "1") != "0"

    def evict(self, shape: str) -> None:
        """A shape reading files (``--files``): its dataset out of the page cache before every run, lotus's or
        the job's own, so each starts from the same state (pages cached outside a memory cgroup of
        benchmarks/slowdisk.sh would otherwise stay hits that escape its throttle and its budget)."""
        if "{files}" in self.shapes[shape][0] and self.a.files.is_dir():
            from lotus.profile import pagecache

            pagecache.evict([str(f) for f in sorted(self.a.files.iterdir()) if f.is_file()])

    def cpus(self, c: int) -> str:
        return f"0-{c - 1}"

    def plain(self, shape: str, c: int, w: int) -> dict | None:
        """The job alone pinned to c CPUs with w workers: its own clock (cached). With ``--truth-repeats N`` the
        mean of N runs, each in its own process (``runs``: theirs; ``ci95``: the t-interval of the mean over
        the runs; ``wall_s``: one run's mean time, so a sweep's time stays one run a point): on the GPU host probes
        of 8 s spread 6-8% sd (gpu-h200/issue-24/probe-repeats/), and one run of the job alone likely as much."""
        n = max(int(getattr(self.a, "truth_repeats", 1) or 1), 1)
        f = self.work / "truth" / f"{shape}-c{c}-w{w}{'-e' if self.whole_epochs() else ''}.json"
        if f.exists():
            d = json.loads(f.read_text())
            if self.mine(d.get("machine"), f) and len(d.get("runs") or [d]) >= n:
                return d
        if n == 1:
            return self._plain_once(shape, c, w, f)
        runs = []
        for k in range(n):
            r = self._plain_once(shape, c, w, f.with_name(f"{f.stem}-r{k}.json"))
            if r is None or r.get("samples_per_s") is None:
                return None
            runs.append(r)
        from lotus.analysis.runspread import Reading, repeats

        rep = repeats([Reading(f"r{k}", x["samples_per_s"]) for k, x in enumerate(runs)])  # lotus's one measure of runs
        mean, sd = rep["mean_samples_per_s"], rep["rel_sd"] * rep["mean_samples_per_s"]
        d = {"samples_per_s": mean, "ci95": rep["mean_ci95"], "rel_sd": rep["rel_sd"], "machine": self.machine,
             "wait_share": statistics.fmean(r["wait_share"] for r in runs),
             "wall_s": statistics.fmean(r["wall_s"] for r in runs), "total_wall_s": sum(r["wall_s"] for r in runs),
             "runs": runs}
        f.write_text(json.dumps(d))
        print(f"truth {shape} c{c} w{w}: mean of {n} runs {mean:.1f}/s (sd {100 * sd / mean:.1f}%)", flush=True)
        return d

    def _plain_once(self, shape: str, c: int, w: int, f: Path) -> dict | None:
        if f.exists():
            d = json.loads(f.read_text())
            if self.mine(d.get("machine"), f):
                return d
        if self.late():
            return None
        f.parent.mkdir(parents=True, exist_ok=True)
        self.evict(shape)
        t = time.monotonic()
        more = ["--whole-epochs"] if self.whole_epochs() else []
        r = subprocess.run(["taskset", "-c", self.cpus(c), *self.args(shape, w), *more, "--json", str(f) + ".tmp"],
                           check=False, capture_output=True, text=True, timeout=600)
        if r.returncode or not Path(str(f) + ".tmp").exists():
            print(f"truth {shape} c{c} w{w} failed: {r.stderr[-400:]}", file=sys.stderr)
            return None
        d = json.loads(Path(str(f) + ".tmp").read_text())
        Path(str(f) + ".tmp").unlink()
        d["wall_s"] = time.monotonic() - t
        d["machine"] = self.machine
        f.write_text(json.dumps(d))
        if d["samples_per_s"] is None:  # no steady state in the run (the prefetched ramp took it all)
            print(f"truth {shape} c{c} w{w}: no steady state after the {d['ramp_batches']}-batch ramp "
                  f"({d['batches_total']} batches in {d['wall_s']:.0f} s)", flush=True)
        else:
            print(f"truth {shape} c{c} w{w}: {d['samples_per_s']:.1f}/s wait {d['wait_share']:.3f} "
                  f"({d['wall_s']:.0f} s)", flush=True)
        return d

    def lotus(self, argv: list[str], out: Path, shape: str | None = None) -> tuple[dict | None, float, str]:
        if shape is not None:
            self.evict(shape)
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "lotus", *argv], check=False, capture_output=True, text=True,
                           timeout=1800)
        secs = time.monotonic() - t
        out.parent.mkdir(parents=True, exist_ok=True)
        (out.parent / (out.name + ".log")).write_text(r.stderr[-20000:])
        try:
            return json.loads(r.stdout), secs, r.stderr[-400:]
        except ValueError:
            return None, secs, r.stderr[-400:]

    def result(self, shape: str, cmd: str) -> Path:
        return self.work / "results" / f"{shape}.{cmd}.json"

    def save(self, shape: str, cmd: str, d: dict) -> None:
        f = self.result(shape, cmd)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"shape": shape, "command": cmd, "what": self.shapes[shape][5], **d,
                                 "machine": self.machine}, indent=1))
        print(f"{shape} {cmd}: {json.dumps({k: v for k, v in d.items() if k != 'detail'})}", flush=True)

    def trace(self, shape: str, workers: int, run: Path) -> bool:
        """``lotus run`` of the shape on its CPUs with ``workers`` into ``run``, the job's own clock beside it
        (``run/own.json``); kept when there (phases resume); False when the run failed."""
        made = run.parent / f"{run.name}.machine"
        if (run / "own.json").exists() and self.mine(made.read_text() if made.exists() else None, run):
            return True
        made.unlink(missing_ok=True)
        run.parent.mkdir(parents=True, exist_ok=True)
        own = run.parent / f"{run.name}.own.json"
        self.evict(shape)
        subprocess.run([sys.executable, "-m", "lotus", "run", "--cpus", self.cpus(self.shapes[shape][1]), "-o",
                        str(run), "--no-verdict", "--", *self.args(shape, workers), "--json", str(own)],
                       check=False, capture_output=True, text=True, timeout=900)
        if not own.exists():
            return False
        own.rename(run / "own.json")
        made.write_text(self.machine)
        return True

    # -- the commands ------------------------------------------------------------------------------------------
    def whatif(self, shape: str) -> dict | None:
        _, c, w, *_ = self.shapes[shape]
        run = self.work / "traced" / shape
        if not self.trace(shape, w, run):
            return None
        pts = [2, 8] if w == 0 else [max(w // 2, 1), 2 * w]
        files = ["--data", str(self.a.files)] if "{files}" in self.shapes[shape][0] else []  # as a user would
        pred, secs, err = self.lotus(["whatif", "-d", str(run), "--workers", ",".join(map(str, pts)),
                                      "--cpus", str(c), *files, "--json"], self.work / "results" / f"{shape}.whatif",
                                     shape)
        if pred is None:
            return {"lotus": None, "truth": None, "error": None, "note": err}
        rows = []
        for p in pred["predictions"]:
            t = self.plain(shape, c, p["num_workers"])
            if t is None:
                return None
            rows.append({"workers": p["num_workers"], "lotus": p["samples_per_s"], "truth": t["samples_per_s"],
                         "truth_ci95": t["ci95"], "bound": p.get("bound"),
                         "error": p["samples_per_s"] / t["samples_per_s"] - 1 if t["samples_per_s"] else None})
        scored = [r for r in rows if r["error"] is not None]
        if not scored:
            return {"lotus": None, "truth": None, "error": None, "note": "the job alone reached no steady state",
                    "detail": {"points": rows}}
        worst = max(scored, key=lambda r: abs(r["error"]))
        return {"lotus": worst["lotus"], "truth": worst["truth"], "error": worst["error"], "probes": 1,
                "seconds": secs, "detail": {"points": rows, "traced": pred.get("measured")}}

    def stalls(self, shape: str) -> dict | None:
        _, c, w, *_ = self.shapes[shape]
        out = self.work / "stalls" / shape
        d, secs, err = self.lotus(["stalls", "--cpus", self.cpus(c), "--max-seconds", str(self.a.seconds),
                                   "--out", str(out), "--json", "--", *self.args(shape, w, 100000)], out, shape)
        t = self.plain(shape, c, w)
        if t is None:
            return None
        if d is None or d.get("warm_stall_share") is None:
            return {"lotus": None, "truth": 100 * t["wait_share"], "error": None, "note": err}
        return {"lotus": 100 * d["warm_stall_share"], "truth": 100 * t["wait_share"],
                "error": 100 * (d["warm_stall_share"] - t["wait_share"]), "unit": "points",
                "probes": len(d.get("probes") or []), "seconds": secs,
                "detail": {k: d.get(k) for k in ("stall_source", "warm_measured_wait_share", "compute_share",
                                                  "prep_stall_share", "fetch_stall_share", "notes")}}

    def tunep(self, shape: str) -> dict | None:
        """``tune`` with every probe a process of its own (``--process-per-probe``; before 2026-11-28 the only way)."""
        return self.tune(shape, per_process=True)

    def tune(self, shape: str, per_process: bool = False) -> dict | None:
        _, c, w, sweep, *_ = self.shapes[shape]
        out = self.work / ("tune-p" if per_process else "tune") / shape
        d, secs, err = self.lotus(["tune", "--only", "num_workers", "--cpus", self.cpus(c), "--max-seconds",
                                   str(self.a.seconds), "--budget-minutes", str(self.a.tune_minutes),
                                   "--max-workers", str(max(sweep)), "--out", str(out), "--json",
                                   *(["--process-per-probe"] if per_process else []), "--",
                                   *self.args(shape, w, 100000)], out, shape)
        truth = {x: self.plain(shape, c, x) for x in sweep}
        if any(v is None for v in truth.values()):
            return None
        if d is None:
            return {"lotus": None, "truth": None, "error": None, "note": err}
        chosen = int(d["best"]["num_workers"])
        at = truth.get(chosen) or self.plain(shape, c, chosen)
        if at is None:
            return None
        best_w = max(truth, key=lambda x: truth[x]["samples_per_s"])
        best = truth[best_w]["samples_per_s"]
        sweep_s = sum(v["wall_s"] for v in truth.values())
        return {"lotus": at["samples_per_s"], "truth": best, "error": at["samples_per_s"] / best - 1,
                "probes": len(d["probes"]), "seconds": secs, "time_share": secs / sweep_s,
                "detail": {"chosen_workers": chosen, "best_workers": best_w, "lotus_rate": d["samples_per_s"],
                           "lotus_ci95": d["ci95"], "sweep": {x: v["samples_per_s"] for x, v in truth.items()},
                           "sweep_s": sweep_s, "stopped": d.get("stopped"),
                           "probe_walls": [[p["settings"].get("num_workers"), round(p["wall_s"], 2), p.get("in_series")]
                                           for p in d["probes"]],
                           "model_holds": (d.get("model_check") or {}).get("holds")}}

    def sens(self, shape: str) -> dict | None:
        _, _, w, _, grid, _ = self.shapes[shape]
        out = self.work / "sens" / shape
        argv = ["sensitivity", "--cpus-grid", ",".join(map(str, grid)), "--max-seconds", str(self.a.seconds),
                "--max-probes", str(self.a.sens_probes), "--out", str(out), "--json"]
        if self.a.data and "{data}" in self.shapes[shape][0]:
            argv += ["--cache-gb", str(self.a.cache_gb)]
        d, secs, err = self.lotus([*argv, "--", *self.args(shape, max(w, 1), 100000)], out, shape)
        # the job alone at each CPU count: the best of g and 2g workers (g only from 4 CPUs on), and of the
        # worker count lotus's cell ran or predicted (0 workers can be the best on one CPU: no hand-off)
        used = {} if d is None else {p["cpus"]: p.get("num_workers") for p in d["matrix"]}
        truth = {}
        for g in grid:
            counts = {g, 2 * g} if g < 4 else {g}
            if isinstance(used.get(g), int):
                counts.add(used[g])
            runs = [self.plain(shape, g, x) for x in sorted(counts)]
            if any(r is None for r in runs):
                return None
            truth[g] = max(r["samples_per_s"] for r in runs)
        if d is None:
            return {"lotus": None, "truth": None, "error": None, "note": err}
        # the column the job alone ran in: warm (the largest budget), or for a shape reading its files, whose
        # truths start with them evicted and read less than an epoch, the cold one
        top = 0 if "{files}" in self.shapes[shape][0] else max(p["cache_gb"] or 0 for p in d["matrix"])
        cells = {p["cpus"]: p for p in d["matrix"] if (p["cache_gb"] or 0) == top}
        rows = [{"cpus": g, "lotus": cells[g]["samples_per_s"], "how": cells[g].get("how"), "truth": truth[g],
                 "error": cells[g]["samples_per_s"] / truth[g] - 1} for g in grid if g in cells]
        best = max(truth.values())
        t_demand = min(g for g in grid if truth[g] >= d["target"] * best)
        errs = [abs(r["error"]) for r in rows]
        worst = max(rows, key=lambda r: abs(r["error"]))
        return {"lotus": worst["lotus"], "truth": worst["truth"], "error": worst["error"],
                "median_abs_error": statistics.median(errs), "probes": len(d["probes"]), "seconds": secs,
                "demand": (d.get("demand") or {}).get("cpus"), "truth_demand": t_demand,
                "detail": {"cells": rows, "notes": d.get("notes"), "model_holds":
                           (d.get("model_check") or {}).get("holds")}}

    def run(self, shapes: list[str], commands: list[str]) -> None:
        if any("{files}" in self.shapes[s][0] for s in shapes):  # the files first: no run of a shape makes them
            subprocess.run([*self.args(next(s for s in shapes if "{files}" in self.shapes[s][0]), 0, 0.1),
                            "--max-batches", "2"], check=False, capture_output=True, timeout=900)
        for shape in shapes:
            for cmd in commands:
                if self.result(shape, cmd).exists():
                    continue
                if self.late():
                    print(f"skip {shape} {cmd}: deadline", flush=True)
                    continue
                r = getattr(self, cmd)(shape)
                if r is not None:
                    self.save(shape, cmd, r)


def fmt(v, unit="") -> str:
    if v is None:
        return "-"
    return f"{v:+.1f} pt" if unit == "points" else f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2f}"


UNSETTLED = 0.2  # a truth whose 95% interval is wider than +-20% cannot tell a prediction right or wrong


def bound_holds(p: dict, truth: float | None = None) -> bool | None:
    """Whether the truth (``truth``, else ``p["truth"]``) is on the side of a whatif point lotus gave as a bound
    (time-slicing's cost not fitted: "upper" at most, "lower" at least); None: not a bound, or no truth."""
    b, t = p.get("bound"), p.get("truth") if truth is None else truth
    if b not in ("upper", "lower") or t is None:
        return None
    return t <= p["lotus"] if b == "upper" else t >= p["lotus"]


def _bound(p: dict) -> str:
    """' (<=, holds)' / ' (>=, fails)' of a bound (:func:`bound_holds`)."""
    holds = bound_holds(p)
    if holds is None:
        return ""
    return f" ({'<=' if p['bound'] == 'upper' else '>='}, {'holds' if holds else 'fails'})"


def _unsettled(p: dict) -> str:
    """' (truth +-N%: unsettled)' where the job alone's own interval is wider than UNSETTLED."""
    ci, truth = p.get("truth_ci95"), p.get("truth")
    if not ci or not truth:
        return ""
    half = (ci[1] - ci[0]) / 2 / truth
    return f" (truth +-{100 * half:.0f}%: unsettled)" if half > UNSETTLED else ""


def _exhaustive(d: dict) -> str:
    """' (N% of every count from the grid's least to its most, projected)': the grid runs a few worker counts;
    a sweep of every count tune may choose in that range would take one run a count (the grid's mean run)."""
    sweep = [int(x) for x in (d["detail"].get("sweep") or {})]
    if len(sweep) < 2 or not d.get("seconds") or not d["detail"].get("sweep_s"):
        return ""
    every = max(sweep) - min(sweep) + 1
    if every <= len(sweep):
        return ""
    projected = d["detail"]["sweep_s"] / len(sweep) * every
    return f" ({100 * d['seconds'] / projected:.0f}% of all {every} counts {min(sweep)}-{max(sweep)}, projected)"


def table(work: Path, hosts: dict[str, Path] | None = None) -> str:
    """The markdown table of ``work``'s results; ``hosts``: several work folders by host, one table with a
    host column."""
    sets = hosts or {"": work}
    host_col = bool(hosts)
    lines = [("| host " if host_col else "") + "| shape | command | lotus | truth | error | probes | seconds | note |",
             ("|---" if host_col else "") + "|---|---|---|---|---|---|---|---|"]
    for host, f in [(h, f) for h, w in sets.items() for f in sorted((w / "results").glob("*.json"))]:
        d = json.loads(f.read_text())
        unit = d.get("unit", "")
        err = d.get("error")
        err_s = "-" if err is None else (f"{err:+.1f} pt" if unit == "points" else f"{100 * err:+.1f}%")
        note = []
        if d["command"] in ("tune", "tunep"):
            note.append(f"{d['detail']['chosen_workers']} workers (best {d['detail']['best_workers']}), "
                        f"{100 * d['time_share']:.0f}% of the sweep's time{_exhaustive(d)}")
        if d["command"] == "sens":
            note.append(f"median |error| {100 * d['median_abs_error']:.1f}%, demand {d['demand']} "
                        f"(truth {d['truth_demand']})")
        if d["command"] == "whatif":
            note.append(", ".join(f"{p['workers']}w {100 * p['error']:+.1f}%{_bound(p)}{_unsettled(p)}"
                                  if p["error"] is not None
                                  else f"{p['workers']}w (no truth: the job alone reached no steady state)"
                                  for p in d["detail"]["points"]))
            traced = d["detail"].get("traced") or {}
            if traced.get("disagrees"):
                note.append(f"flagged by whatif: the model is {100 * traced['error']:+.0f}% off the traced run")
        if d.get("note"):
            note.append(d["note"].strip().splitlines()[-1][:120])
        lotus_s = f"{d['lotus']:.1f}%" if unit == "points" and d["lotus"] is not None else fmt(d["lotus"])
        truth_s = f"{d['truth']:.1f}%" if unit == "points" and d["truth"] is not None else fmt(d["truth"])
        secs = d.get("seconds")
        lines.append((f"| {host} " if host_col else "") +
                     f"| {d['shape']} | {d['command']} | {lotus_s} | {truth_s} | {err_s} | {d.get('probes', '-')} | "
                     f"{'-' if secs is None else f'{secs:.0f}'} | {'; '.join(note)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", choices=sorted(SHAPES), default="local")
    p.add_argument("--work", required=True,
                   help="the work folder; with --table also HOST=DIR,HOST=DIR (or ;-separated): one table of "
                        "several hosts")
    p.add_argument("--data", type=Path, default=None, help="ImageFolder root for the JPEG shapes")
    p.add_argument("--files", type=Path, default=Path("/tmp/lotus-files"),
                   help="the io_bound shape's files (made by its first run; run it under benchmarks/slowdisk.sh)")
    p.add_argument("--shapes", default=None, help="comma-separated (default: all of --host)")
    p.add_argument("--commands", default=",".join(COMMANDS))
    p.add_argument("--seconds", type=float, default=10.0, help="steady seconds of every run and probe cap")
    p.add_argument("--tune-minutes", type=float, default=3.0)
    p.add_argument("--sens-probes", type=int, default=5)
    p.add_argument("--cache-gb", type=float, default=0.5)
    p.add_argument("--truth-repeats", type=int, default=1,
                   help="runs of the job alone per setting, their mean the truth (each in its own process)")
    p.add_argument("--deadline-s", type=float, default=1e9, help="start no step after this many seconds")
    p.add_argument("--table", type=Path, default=None, help="write the markdown table of --work's results here")
    p.add_argument("--truths", default=None, metavar="C:W,...",
                   help="only run the job alone of every --shapes at these CPUs:workers (cached like every truth; a "
                        "call of its own before a command's, so that the command's later call finds them)")
    a = p.parse_args(argv)
    if a.table is not None:
        sep = ";" if ";" in a.work else ","  # ";" between HOST=DIR pairs lets a HOST hold commas
        hosts = dict(x.split("=", 1) for x in a.work.split(sep)) if "=" in a.work else None
        a.table.write_text(table(Path(a.work), {h: Path(d) for h, d in hosts.items()} if hosts else None))
        print(a.table.read_text())
        return 0
    shapes = a.shapes.split(",") if a.shapes else list(SHAPES[a.host])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if a.truths:
        c = Corpus(a)
        for shape in shapes:
            for cw in a.truths.split(","):
                if c.late():
                    print(f"skip {shape} {cw}: deadline", flush=True)
                    continue
                cpus, workers = (int(x) for x in cw.split(":"))
                c.plain(shape, cpus, workers)
        return 0
    Corpus(a).run(shapes, [c for c in a.commands.split(",") if c])
    print(table(Path(a.work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
