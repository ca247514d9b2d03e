"""The out-of-core engine: a run read in fixed-size chunks, in memory bounded by its batches, not its events.

``scan_run(run)`` reads every ``.lotustrace`` file of a run in chunks of
:data:`lotus.trace.chunks.CHUNK_RECORDS` records (numpy, at memory speed) and keeps:

* the batch-level events folded into compact per-batch columns (:mod:`lotus.query.batchparts`, a
  :class:`~lotus.query.batchtable.BatchTable` in the engine's ``batch_table``): the batches table, and
  so waits and verdicts, is the one :func:`lotus.query.batches.batches_from_events` makes from the
  full events, exactly;
* the other events that are *not* per-sample detail (``sample``, ``load``, ``transform`` and the op
  events are left out; of the batch-level ones only ``exhausted``, failed ``fetch`` and GPU events) as
  an events DataFrame with the columns of :func:`lotus.trace.load_events` (outcomes, GPU telemetry,
  markers); the fetches' detail flags are counted (:func:`lotus.query.outcomes.detail_share`);
* per op (``load``, every transform op, ``transform``, ``sample``, ``collate``): count, sum, variance
  (Chan's merge of per-chunk moments), exact min and max, and a log-histogram of durations
  (:data:`BINS_PER_OCTAVE` bins per power of two) for the quantiles.

Exact vs approximate (see docs/analysis.md, "Large traces"): counts, sums, means, min and max are
exact; std agrees with numpy's to ~1e-12; the quantiles (median, p25, p75, p90, p99) are read off the
histogram, within 0.04% of numpy's (linear interpolation between neighbouring ranks, each rank's value
being its bin's geometric centre, clipped to [min, max]). Durations <= 0 fall in one bin valued 0.

Excluding batches (failed or exhausted fetches, ``--remove-outliers``) needs a second scan, made only
when there is something to exclude (:meth:`OpEngine.op_table`).

The files are read in parts (runs of consecutive files, :func:`lotus.query.scanfiles.scan_files`), in
this process or in parallel on every core or on a cluster (:mod:`lotus.query.parallel`: ``$LOTUS_JOBS``,
``$LOTUS_CLUSTER``), and merged in file order into exactly what one pass keeps
(:mod:`lotus.query.scanmerge`): the same outputs, byte for byte.

What the scan keeps beside the events is attached as ``events.attrs["op_engine"]`` (an
:class:`~lotus.query.opengine.OpEngine`); :func:`lotus.analysis.stats.op_durations` and its users
read per-op statistics from it. ``n_samples`` of batches without a collate is counted by another scan
(:func:`lotus.query.rescan.fill_sample_counts`).
"""

from __future__ import annotations

import logging

from lotus.errors import InputError
from lotus.query.batchparts import SparseBatchIds
from lotus.query.opengine import OpEngine
from lotus.query.rescan import _frame
from lotus.trace.discover import Run
from lotus.trace.original import release_freed_memory
from lotus.trace.parts import mark_continued, stitch

_log = logging.getLogger("lotus.trace")
def scan_run(run: Run, columns=None, op_stats: bool = True, census: bool = False, op_reduce: str = ""):
    """The events DataFrame of ``run`` without per-sample detail, with an :class:`OpEngine` in its
    ``attrs["op_engine"]`` (see the module doc). The batch-level events are folded into the engine's
    ``batch_parts`` (:mod:`lotus.query.batchparts`) rather than kept as rows, unless their batch ids are
    too sparse for it: the run is then scanned again, keeping them as rows. ``columns``: the per-batch
    columns to keep (:data:`lotus.query.batchparts.SUMMARY_COLUMNS` for the summaries of ``lotus
    analyze stats|wait|verdict``; the table then makes no batches DataFrame); None: all. ``census``: also
    count every record (:class:`lotus.query.census.Census`, the engine's ``census``; ``lotus info``).
    ``op_reduce``: ``"batches"`` also keeps per-batch op sums, ``"values"`` those and every op duration in
    temporary files (:mod:`lotus.query.opreduce`, the engine's ``op_reduce``: ``lotus report`` and ``lotus
    plot`` then read the files once)."""
    if run.original:
        raise InputError("original LotusTrace logs are read in memory (lotus.trace.load_events)", run.path)
    try:
        return _scan(run, fold=True, columns=columns, op_stats=op_stats, census=census, op_reduce=op_reduce)
    except SparseBatchIds as exc:
        _log.info("%s: %s: batch ids too sparse to fold; scanning again with every batch-level event kept",
                  run.path, exc)
        release_freed_memory()
        return _scan(run, fold=False, op_stats=op_stats, census=census, op_reduce=op_reduce)


def _scan(run: Run, fold: bool, columns=None, op_stats: bool = True, census: bool = False, op_reduce: str = ""):
    from lotus.query.parallel import scan_parts
    from lotus.query.scanfiles import ScanContext
    from lotus.query.scanmerge import merge_parts
    from lotus.trace.events import readable_native, warn_main_and_ranks

    good, offsets, per_process = readable_native(run)
    ctx = ScanContext(str(run.path), offsets, per_process, fold, None if columns is None else frozenset(columns),
                      op_stats, census, op_reduce=op_reduce)
    part = merge_parts(scan_parts(good, ctx))
    acc, parts = part.acc, part.batch_parts
    if not acc.files:
        raise InputError("no readable trace file", run.path)
    if run.whole is None:  # some ranks of a larger run: it says these of all its files
        warn_main_and_ranks(acc.files, run.path)
    mark_continued(acc.files, stitch(good))
    names = list(acc.names)
    release_freed_memory()  # the chunks' temporaries (glibc keeps them otherwise), before pandas is imported
    df = _frame(acc, run)
    engine = df.attrs["op_engine"] = OpEngine(good, offsets, per_process, names, part.slot_codes, part.moments,
                                              part.first)
    engine.by_epoch, engine.by_rank = part.by_epoch, part.by_rank
    engine.op_stats = op_stats
    engine.census = part.census
    engine.op_reduce = part.op_reduce  # None unless asked for (op_reduce)
    df.attrs["engine"] = "scan"
    if fold:
        engine.folded_extent, engine.fetch_counts = parts.extent, parts.fetches
        engine.batch_table = parts.finish(df.attrs)
        release_freed_memory()  # the dense per-group arrays
    return df
