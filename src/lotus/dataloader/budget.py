"""Which batches carry per-sample and per-op records: the detail budget.

Every batch's own records (dispatch, fetch, collate, put, wait, consumption...) are always written. The
per-sample ``sample`` record and the per-op records are written for *detail batches* only, chosen
per whole batch when it starts (:meth:`DetailBudget.step`, called by
:meth:`lotus.dataloader.recorder.Recorder.begin_batch` in workers and by the main process's iterators;
the caller adds each batch's preparation to ``prep_ns`` when it ends): any other batch runs the plain, untimed path
(the original ``Compose`` loop, no per-sample record, no clock read per sample or op).

The choice keeps the tracer's added CPU within ``fraction`` of the pipeline's own work, measured as it
runs: every batch adds ``fraction * prep_ns`` (its preparation time, always recorded) to a credit, a
detail batch takes its estimated cost off it (:data:`SAMPLE_COST_NS` per sample record,
:data:`OP_COST_NS` per op record, plus :data:`RELATIVE_COST` of its work: the caches the tracer's code
and buffers evict between pixel-heavy ops, measured by ``benchmarks/overhead_pairs.py``), and a batch
is in detail while the credit is not negative. The first :data:`FIRST_DETAIL_BATCHES` batches of every
epoch on every worker (and of the main process with num_workers=0) are always in detail, so each epoch
and worker is covered, and a pipeline whose cost is not known yet (its first batch) is recorded in full.

One instance per recorder (a worker process, or a main-process iterator): no locking, no allocation.
"""

from __future__ import annotations

import math

FIRST_DETAIL_BATCHES = 1  # batches at the start of each epoch, per worker, always in detail
SAMPLE_COST_NS = 1_500  # tracer CPU per detail sample: its proxy/subclass call and one record
OP_COST_NS = 800  # tracer CPU per op record: two clock reads and an append
RELATIVE_COST = 0.02  # tracer CPU per ns of a detail batch's work (cache effects; see docs/overhead.md)
DEFAULT_BUDGET_PCT = 0.5


class DetailBudget:
    """Per-batch detail choice within a CPU budget (``fraction`` of the work; None: every batch)."""

    __slots__ = ("covered", "credit_ns", "detail", "epoch", "first_left", "fraction", "nrec0", "nsamp0", "prep_ns",
                 "skip")

    def __init__(self, fraction: float | None):
        self.fraction = fraction
        self.credit_ns = 0.0
        self.epoch = None
        self.first_left = 0
        self.detail = True
        self.nrec0 = 0
        self.nsamp0 = 0
        self.prep_ns = 0  # the preparation of the batches since the last step() (added by the caller)
        self.covered = 1  # how many batches prep_ns sums
        self.skip = 0  # batches the caller may run plain without asking step() (see step)

    def step(self, epoch: int, nrec: int, nsamp: int) -> bool:
        """Whether the batch starting now records per-sample/per-op detail, after accounting for the
        batches since the last call: their preparation, summed in ``prep_ns`` by the caller (``nrec`` /
        ``nsamp``: op / sample records so far, for the cost of the last batch if it was in detail).

        After a plain choice it also sets ``skip``: how many of the next batches of this epoch are plain
        whatever their preparation, at least as many as their credit needs to reach zero at the last
        preparation seen, halved (the caller counts them down instead of calling; with steady batches
        the choices are exactly those of calling every batch, with slower ones a detail batch comes at
        most that much later, never sooner: never over the budget)."""
        fraction = self.fraction
        if fraction is None:
            return True
        prep = self.prep_ns
        self.prep_ns = 0
        credit = self.credit_ns + fraction * prep
        if self.detail:
            credit -= ((nsamp - self.nsamp0) * SAMPLE_COST_NS + (nrec - self.nrec0) * OP_COST_NS
                       + RELATIVE_COST * prep)
        self.credit_ns = credit
        if epoch != self.epoch:
            self.epoch = epoch
            self.first_left = FIRST_DETAIL_BATCHES
        if self.first_left > 0:
            self.first_left -= 1
            detail = True
        else:
            detail = credit >= 0.0
        skip = 0
        if detail:
            self.nrec0 = nrec
            self.nsamp0 = nsamp
        elif prep > 0:
            per = prep / self.covered  # one batch's preparation
            skip = (math.ceil(-credit / (fraction * per)) - 1) // 2
        self.skip = skip
        self.covered = skip + 1
        self.detail = detail
        return detail


def budget_fraction(detail, budget_pct) -> float | None:
    """The budget as a fraction of the work (None: full detail) from the DataLoader keywords
    ``trace_detail`` ("budget" or "full") and ``trace_budget_pct`` (percent, > 0); ValueError naming the
    keyword (or environment variable) otherwise."""
    import math
    import os

    from lotus import _env

    where = "trace_detail"
    if detail is None:
        detail, where = os.environ.get(_env.DETAIL, "").strip() or "budget", _env.DETAIL
    if detail not in ("budget", "full"):
        raise ValueError(f"{where} must be 'budget' or 'full', got {detail!r}")
    if detail == "full":
        return None
    where = "trace_budget_pct"
    if budget_pct is None:
        text = os.environ.get(_env.DETAIL_BUDGET, "").strip()
        budget_pct, where = (text, _env.DETAIL_BUDGET) if text else (DEFAULT_BUDGET_PCT, where)
    try:
        value = float(budget_pct)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a number of percent > 0, got {budget_pct!r}") from None
    if isinstance(budget_pct, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be a number of percent > 0, got {budget_pct!r}")
    return value / 100.0
