"""The worker path's cost of a batch's bytes, priced into a model fitted on runs without workers.

A num_workers=0 trace (format >= 6) records its batches' bytes (``batch_bytes``) but not what a worker's
collation into shared memory and the main process's first touch of it cost; :func:`price` measures both on
this machine (:mod:`lotus.profile.shmprobe`, once per batch size in a process) and sets the model's
``shm_ns_per_byte``, which the engine adds to each batch with workers (docs/model.md, "From a num_workers=0
trace to workers"). Commands that run where the job runs call it: whatif, tune, sensitivity.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=8)
def _cost(mb: int):
    from lotus.profile.shmprobe import measure

    return measure(mb << 20)


def price(model, batch_size: int | None = None) -> bool:
    """Set ``model.shm_ns_per_byte`` where every run had no workers and recorded its batches' bytes; True
    when it did (False: nothing to price, or shared memory could not be probed)."""
    t = model.traced
    if not model.without_workers or not t.batch_bytes:
        return False
    nbytes = t.batch_bytes * (batch_size or t.batch_size) / max(t.batch_size, 1)
    cost = _cost(max(round(nbytes / (1 << 20)), 1))
    if cost is None:
        return False
    model.shm_ns_per_byte = (cost.write_ns_per_byte, cost.touch_ns_per_byte)
    return True


__all__ = ["price"]
