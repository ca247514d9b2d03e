"""The probes of ``lotus sensitivity`` measured so far, the model chosen by cross-validation over them
(:mod:`lotus.model.check`) and its check, and the storage replay's read times every fit gets
(:mod:`lotus.model.storage`)."""

from __future__ import annotations

import logging

from lotus.profile import matrix as mx

_log = logging.getLogger("lotus.profile")


def _variants(bps):
    """The fit's structural variants that cross-validation chooses between (see :mod:`lotus.model.check`):
    the default; the CPU share and contention left at their assumptions (a pair of probes can mislead their
    fit); runs without workers left out of the workers' costs (the main process prepares batches on other
    terms: the CUDA step's threads, no worker start-up)."""
    from lotus.model import fit as fit_runs
    from lotus.model.workerpath import price

    def fit(runs, **kw):
        model = fit_runs(runs, **kw)
        price(model)  # from num_workers=0 probes only: the worker path's cost of their batches' bytes
        return model

    def default(runs):
        return fit(runs, bytes_per_sample=bps)

    def assumed_cpu(runs):
        return fit(runs, bytes_per_sample=bps, contention=0.0, cpu_fraction=1.0, slicing=0.0)

    def workers_only(runs):
        with_w = [r for r in runs if _workers_of(r)]
        return fit(with_w or runs, bytes_per_sample=bps)

    return {"default": default, "cpu terms assumed": assumed_cpu, "worker runs only": workers_only}


def _workers_of(run) -> int:
    from lotus.model.observation import main_loader

    try:
        desc = run.loaders.get((int(run.batches["rank"].min()), main_loader(run.batches))) or {}
    except Exception:
        return 1
    w = desc.get("num_workers")
    return w if isinstance(w, int) else 1


class ProbeFit:
    """The probes measured so far, the model chosen by cross-validation over them, and its check."""

    def __init__(self, bps, hits, dataset_bytes):
        self.io_scale: dict[int, float] = {}  # the storage replay's read times (lotus.model.storage), every fit
        self.variants = {name: (lambda runs, f=f: self._with_io(f(runs))) for name, f in _variants(bps).items()}
        self.hits, self.dataset_bytes = hits, dataset_bytes
        self.probes: list = []  # lotus.model.check.Probe, in the order they ran
        self.model, self.check, self.unfit = None, None, None

    def _with_io(self, model):
        model.io_scale = dict(self.io_scale)
        return model

    def replay(self, files: list[str], counts) -> list[str]:
        """Where the probes read from storage: the dataset's files read at ``counts`` readers, for every fit."""
        from lotus.model.storage import scale_by_replay

        if self.model is None:
            return []
        notes = scale_by_replay(self.model, files, counts)
        if self.model.io_scale:
            self.io_scale = dict(self.model.io_scale)
            self.refit()
        return notes

    def rate(self, model, key) -> float | None:
        cpus, gb, workers = key
        p = model.predict(workers, float(cpus), cache_hit_rate=mx.hit_rate(gb, self.hits, self.dataset_bytes))
        return p.samples_per_s

    def before(self, key) -> float | None:
        """The current model's prediction for a probe about to run."""
        if self.model is None:
            return None
        try:
            return self.rate(self.model, key)
        except Exception:
            return None

    def add(self, probe: dict, run, key, predicted_before) -> None:
        from lotus.model.check import Probe

        self.probes.append(Probe(probe["name"], run, probe["samples_per_s"], probe.get("ci95"), key,
                                 predicted_before, probe.get("note")))
        probe["predicted_before"] = predicted_before
        self.refit()

    def refit(self) -> None:
        from lotus.model.check import choose_variant

        name, self.check = choose_variant(self.probes, self.variants, self.rate)
        try:
            self.model = self.variants[name]([p.run for p in self.probes])
            self.unfit = None
        except Exception as exc:  # a model that cannot be fitted: measured points only, said plainly
            _log.warning("the model could not be fitted: %s", exc)
            self.model, self.unfit = None, str(exc) or type(exc).__name__
            self.check.holds = False


__all__ = ["ProbeFit"]
