"""``DataLoader(num_workers="auto")``: the worker count of each epoch chosen from the previous epochs' trace.

The first epoch runs with half the CPUs this process may use (at least 1). At the start of each later
epoch, lotus reads this loader's trace so far (this rank's files), fits :mod:`lotus.model` on it and
asks it for the samples/s of every count from 0 to the CPUs available; it keeps the current count
unless another is predicted to be more than ``SWITCH_GAIN`` faster, and then takes the smallest count
within ``NEAR_BEST`` of the best (CPUs left free are worth something). The choice is recorded as a
``workers_set`` event (arg = the new count) and logged.

Batches and their order are those of a fixed count: a map-style dataset's samples, batches and
order come from its sampler, whatever the worker count (random transforms draw from per-worker RNG
streams, as torch's do for any change of num_workers). With persistent_workers=True a change restarts
the workers and the RNG state the sampler sees is kept as it would be (the count never drops to 0
there). An IterableDataset's data depends on the worker
count (each worker iterates its own copy), so it keeps its first count. Needs tracing (trace_dir or
LOTUS_TRACE_DIR); without it the first count stays, with one warning.
"""

from __future__ import annotations

import logging
import os

from lotus._warn import warn_once

_log = logging.getLogger("lotus.dataloader")
SWITCH_GAIN = 0.05  # switch only for a predicted gain above this
NEAR_BEST = 0.02  # then take the fewest workers within this of the best prediction
AUTO = "auto"


def cpus_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def first_count(cpus: int | None = None) -> int:
    return max(1, (cpus or cpus_available()) // 2)


def choose(predicted: dict[int, float | None], current: int) -> tuple[int, str]:
    """The count for the next epoch from ``{count: predicted samples/s}`` (pure; see the module doc)."""
    rated = {n: v for n, v in predicted.items() if v}
    if not rated:
        return current, "no prediction: the model could not rate any count"
    best = max(rated.values())
    now = rated.get(current)
    if now is not None and now >= best / (1 + SWITCH_GAIN):
        return current, f"keeps {current}: within {SWITCH_GAIN:.0%} of the best predicted ({best:,.1f} samples/s)"
    pick = min(n for n, v in rated.items() if v >= best * (1 - NEAR_BEST))
    return pick, (f"{pick} workers predicted at {rated[pick]:,.1f} samples/s"
                  + (f" (now {current}: {now:,.1f})" if now is not None else ""))


def lt_persistent(lt) -> bool:
    return bool(getattr(lt, "persistent", False))


def decide(lt, current: int, cpus: int) -> tuple[int, str]:
    """Fit the model on this loader's trace so far and choose the next epoch's count."""
    from lotus.model import fit
    from lotus.model.observation import RunTrace
    from lotus.query import batches_from_events
    from lotus.trace import load_events

    lt.flush()
    ev = load_events(lt.trace_dir)
    ev = ev[(ev["rank"] == lt.rank) & (ev["loader"] == lt.loader_id)]
    if ev.empty:
        return current, "no events of this loader yet"
    loaders = {}
    for f in ev.attrs.get("files", []):
        for key, desc in (f.get("loaders") or {}).items():
            if int(f.get("rank", 0)) == lt.rank and int(key) == lt.loader_id:
                loaders[(lt.rank, int(key))] = desc
    model = fit(RunTrace(ev, batches_from_events(ev), loaders, name="auto"))
    lowest = 1 if lt_persistent(lt) else 0  # without workers a loader cannot keep them: its RNG use would change
    predicted = {n: model.predict(n, float(cpus)).samples_per_s for n in range(lowest, cpus + 1)}
    return choose(predicted, current)


class AutoWorkers:
    """The per-loader state of ``num_workers="auto"``."""

    def __init__(self, loader, cpus: int):
        self.cpus = cpus
        self.enabled = True
        self.epochs = 0
        self.history: list[tuple[int, int, str]] = []  # (epoch, count, why)
        from torch.utils.data import IterableDataset

        if isinstance(loader.dataset, IterableDataset):
            self.enabled = False
            warn_once("auto-iterable", f"lotus: num_workers='auto' keeps {loader.num_workers} workers for an "
                      "IterableDataset (its data depends on the worker count)")

    def before_epoch(self, loader, lt) -> None:
        """Set ``loader.num_workers`` for the epoch about to start (called before its iterator is made)."""
        epoch = self.epochs
        self.epochs += 1
        if not self.enabled or epoch == 0:
            return
        if lt is None or not lt.on:
            self.enabled = False
            warn_once("auto-untraced", f"lotus: num_workers='auto' needs tracing (trace_dir= or LOTUS_TRACE_DIR); "
                      f"staying at {loader.num_workers} workers")
            return
        current = loader.num_workers
        lt.persistent = bool(loader.persistent_workers)
        try:
            n, why = decide(lt, current, self.cpus)
        except Exception as exc:  # never hurt training: keep the count
            warn_once("auto-decide", f"lotus: num_workers='auto' could not decide ({exc!r}); keeping {current}")
            return
        self.history.append((epoch, n, why))
        _log.info("num_workers='auto', epoch %d: %s", epoch, why)
        if n != current:
            set_workers(loader, n)
        lt.record_workers_set(n)


def set_workers(loader, n: int) -> None:
    """Change a loader's worker count between epochs (persistent workers are restarted)."""
    from lotus.dataloader import _torch_compat as compat

    it = compat.persistent_iterator(loader)
    if it is not None:
        compat.shutdown_workers(it)
        compat.drop_persistent_iterator(loader)
        # A new iterator draws a base seed from the loader's RNG before its sampler draws the epoch's
        # order; a persistent iterator's reset does not. The RNG state from before that draw is put back
        # when the new iterator starts its sampler (TracedMultiProcessingIter._reset), so the order is
        # the one the persistent loader would have had.
        loader._lotus_rng_state = _rng_state(loader.generator)
    loader.num_workers = n
    if n == 0:
        if loader.persistent_workers:
            object.__setattr__(loader, "persistent_workers", False)
        loader.prefetch_factor = None
    elif loader.prefetch_factor is None:
        loader.prefetch_factor = 2


def _rng_state(generator):
    import torch

    return (generator, generator.get_state() if generator is not None else torch.get_rng_state())


def restore_rng(loader) -> None:
    """Put back the RNG state saved by :func:`set_workers` (once)."""
    saved = getattr(loader, "_lotus_rng_state", None)
    if saved is None:
        return
    loader._lotus_rng_state = None
    import torch

    generator, state = saved
    if generator is not None:
        generator.set_state(state)
    else:
        torch.set_rng_state(state)
