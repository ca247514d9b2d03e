"""Which batches carry per-sample and per-op records: the detail budget.

Every batch's own records (dispatch, fetch, collate, put, wait, consumption...) are always written. The
per-sample ``sample`` record and the per-op records are written for *detail batches* only, chosen
per whole batch when it starts (:meth:`DetailBudget.step`, called by
:meth:`lotus.dataloader.recorder.Recorder.begin_batch` in workers and by the main process's iterators;
the caller adds each batch's preparation to ``prep_ns`` and counts it in ``prep_n`` when it ends): any other
batch runs the plain, untimed path
(the original ``Compose`` loop, no per-sample record, no clock read per sample or op).

The choice keeps the tracer's added CPU within ``fraction`` of the pipeline's own work, measured as it
runs: every batch adds ``fraction * prep_ns`` (its preparation time, always recorded) to a credit, a
detail batch takes its cost off it, and a batch is in detail while the credit is not negative. A detail
batch's cost is the larger of a model (:data:`SAMPLE_COST_NS` per sample record, :data:`OP_COST_NS` per
op record, plus :data:`RELATIVE_COST` of its work: the caches the tracer's code and buffers evict between
pixel-heavy ops, measured by ``benchmarks/overhead_pairs.py``) and, once :data:`MEASURED_AFTER` detail
batches were seen, what detail batches really cost on this host and pipeline: each detail batch's
preparation minus the running mean of plain batches', averaged, at the lower end of its interval (so
noise never raises it). The model was fitted on one machine; on H100 hosts a detail batch cost 24-49%
more on the text pipeline and 71-95% more on the trivial one (benchmarks/overhead_ablation.py), and the
model alone overspent the budget there. The first :data:`FIRST_DETAIL_BATCHES` batches of every
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
MEASURED_AFTER = 4  # detail batches seen before their measured cost can raise the model's
PLAIN_WEIGHT = 16  # plain batches the running mean of their preparation mostly holds


class DetailBudget:
    """Per-batch detail choice within a CPU budget (``fraction`` of the work; None: every batch)."""

    __slots__ = ("credit_ns", "detail", "epoch", "excess_m2", "excess_n", "excess_ns", "first_left", "fraction",
                 "nrec0", "nsamp0", "plain_ns", "prep_n", "prep_ns", "skip")

    def __init__(self, fraction: float | None):
        self.fraction = fraction
        self.credit_ns = 0.0
        self.epoch = None
        self.first_left = 0
        self.detail = True
        self.nrec0 = 0
        self.nsamp0 = 0
        self.prep_ns = 0  # the preparation of the batches since the last step() (added by the caller)
        self.prep_n = 0  # how many batches prep_ns sums (counted by the caller)
        self.skip = 0  # batches the caller may run plain without asking step() (see step)
        self.plain_ns = 0.0  # running mean of a plain batch's preparation (0: none seen yet)
        self.excess_ns = 0.0  # mean over detail batches of their preparation minus plain_ns then
        self.excess_m2 = 0.0  # (Welford's sum of squared deviations, for its standard error)
        self.excess_n = 0

    def _measured(self, excess: float) -> float:
        """Adds one detail batch's measured excess; returns the lower end of the mean's ~95% interval
        (0 until MEASURED_AFTER were seen): a noisy pipeline (JPEG batches vary by milliseconds, its
        detail costs tenths of one) raises the model only when the measurement clearly says so."""
        n = self.excess_n = self.excess_n + 1
        d = excess - self.excess_ns
        self.excess_ns += d / n
        self.excess_m2 += d * (excess - self.excess_ns)
        if n < MEASURED_AFTER:
            return 0.0
        return self.excess_ns - 2.0 * math.sqrt(self.excess_m2 / ((n - 1) * n))

    def step(self, epoch: int, nrec: int, nsamp: int) -> bool:
        """Whether the batch starting now records per-sample/per-op detail, after accounting for the
        batches since the last call: their preparation, summed in ``prep_ns`` by the caller (``nrec`` /
        ``nsamp``: op / sample records so far, for the cost of the last batch if it was in detail).

        After a plain choice it also sets ``skip``: how many of the next batches of this epoch are plain
        whatever their preparation: one fewer than their credit needs to reach zero at the last
        preparation seen (the caller counts them down instead of calling; with steady batches the
        choices are exactly those of calling every batch; with slower ones a detail batch comes later,
        with faster ones the next call skips again: never sooner, never over the budget). Skipping the
        whole way (not half of it, as before) matters: each call drains the fast path's kept batches
        and steps here, and on a 0.24 ms text batch the ~7 calls per detail batch that halving made cost
        ~2 us a batch (benchmarks/overhead_ablation.py, docs/overhead.md)."""
        fraction = self.fraction
        if fraction is None:
            return True
        prep, n = self.prep_ns, self.prep_n
        self.prep_ns = self.prep_n = 0
        credit = self.credit_ns + fraction * prep
        if self.detail:  # prep is that one detail batch's (a detail choice skips nothing)
            cost = (nsamp - self.nsamp0) * SAMPLE_COST_NS + (nrec - self.nrec0) * OP_COST_NS + RELATIVE_COST * prep
            if self.plain_ns and n == 1:
                cost = max(cost, self._measured(prep - self.plain_ns))
            credit -= cost
        elif n:
            plain = self.plain_ns
            self.plain_ns = prep / n if not plain else plain + min(1.0, n / PLAIN_WEIGHT) * (prep / n - plain)
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
        elif self.plain_ns > 0:  # batches until the credit is back at zero, at their running mean cost
            skip = max(0, math.ceil(-credit / (fraction * self.plain_ns) * (1.0 - 1e-12)) - 1)
        self.skip = skip
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
