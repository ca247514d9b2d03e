"""A small hand-written lotus trace with every fetch outcome: ok batches, exhausted fetches, indices
dispatched past the end, and a failed batch (shared by the trace, analysis and CLI tests).

Epoch 0 (an IterableDataset running out): batches 0-3 ok (w0: 0, 2; w1: 1, 3), key 4 exhausted in w0
and key 5 in w1 (their `arrive` flagged), keys 6 and 7 only dispatched. Epoch 1: batches 0, 1 ok,
batch 2 failed in w1 (the loop waited 900 ms for it, then got the exception).

Ok fetches last 10, 12, ... 20 ms (mean 15 ms) with 2 samples each (load 2 ms, op ``Crop`` 1 ms);
the failed fetch lasts 500 ms (one sample, ``Crop`` 300 ms), each exhausted fetch 200 ms (one
``load`` of 150 ms in key 4): any of them counted as a batch moves every mean.
"""

from __future__ import annotations

from pathlib import Path

from lotus.trace import schema as S
from lotus.trace.writer import TraceWriter

MS = 1_000_000
T0 = 10_000 * MS  # monotonic ns of the first event
OK_FETCH_MS = {(0, 0): 10, (0, 1): 12, (0, 2): 14, (0, 3): 16, (1, 0): 18, (1, 1): 20}
WORKER_OF = {(0, 0): 0, (0, 1): 1, (0, 2): 0, (0, 3): 1, (1, 0): 0, (1, 1): 1}
EXHAUSTED = {(0, 4): 0, (0, 5): 1}  # key -> worker
FAILED = ((1, 2), 1)  # key, worker
DISPATCH_ONLY = ((0, 6), (0, 7))
PIDS = {-1: 7000, 0: 7001, 1: 7002}


def _rec(w: TraceWriter, name_id: int, epoch: int, start: int, dur: int = 0, batch: int = -1, sample: int = -1,
         arg: int = 0) -> None:
    w.buf += w.pack(name_id, 0, epoch, start, dur, batch, sample, arg)


def write_outcome_run(directory, *, legacy: bool = False) -> Path:
    """Write the run in ``directory``. ``legacy``: as lotus <= 0.1 wrote it (exhausted fetches are
    ``fetch`` events flagged ``FETCH_STOP``, arrives carry no flag)."""
    d = Path(directory)
    # the records below are the layout of format 1 (load and sample records per item): say so
    main = TraceWriter(d, "main", extra={"pid": PIDS[-1], "version": 1})
    main.define_loader(0, {"name": "outcomes", "batch_size": 2, "num_workers": 2, "prefetch_factor": 2,
                           "persistent_workers": False, "in_order": True})
    workers = {k: TraceWriter(d, "worker", worker_id=k, extra={"pid": PIDS[k], "version": 1}) for k in (0, 1)}
    crop = {k: w.name_id("Crop") for k, w in workers.items()}
    t = T0
    for epoch in (0, 1):
        _rec(main, S.EV_EPOCH_START, epoch, t, arg=2)
        keys = [b for (e, b) in [*OK_FETCH_MS, *EXHAUSTED, FAILED[0], *DISPATCH_ONLY] if e == epoch]
        for b in sorted(keys):
            k = WORKER_OF.get((epoch, b), EXHAUSTED.get((epoch, b), FAILED[1] if (epoch, b) == FAILED[0] else b % 2))
            _rec(main, S.EV_DISPATCH, epoch, t + b * MS, 100_000, b, arg=k)
        t += 20 * MS
        for b in sorted(keys):
            key = (epoch, b)
            if key in DISPATCH_ONLY:
                continue
            k = WORKER_OF.get(key, EXHAUSTED.get(key, FAILED[1]))
            w = workers[k]
            start = t
            if key in OK_FETCH_MS:
                dur = OK_FETCH_MS[key] * MS
                for s in range(2):
                    s0 = start + 1 * MS + s * 4 * MS
                    _rec(w, S.EV_SAMPLE, epoch, s0, 3 * MS + 100, b, 2 * b + s)
                    _rec(w, S.EV_LOAD, epoch, s0, 2 * MS, b, 2 * b + s)
                    _rec(w, crop[k], epoch, s0 + 2 * MS, 1 * MS, b, 2 * b + s)
                _rec(w, S.EV_COLLATE, epoch, start + 9 * MS, MS // 2, b, arg=2)
                _rec(w, S.EV_FETCH, epoch, start, dur, b)
                _rec(w, S.EV_PUT, epoch, start + dur - 100_000, 50_000, b)
                _rec(main, S.EV_WAIT, epoch, start, dur + MS, b)
                _rec(main, S.EV_ARRIVE, epoch, start + dur + MS // 2, 0, b)
                _rec(main, S.EV_CONSUMED, epoch, start + dur + MS, 0, b)
                _rec(main, S.EV_STEP, epoch, start + dur + MS, 5 * MS, b)
                t += dur + 6 * MS
            elif key in EXHAUSTED:
                dur = 200 * MS
                if b == 4:
                    _rec(w, S.EV_LOAD, epoch, start + MS, 150 * MS, b, 99)
                if legacy:
                    _rec(w, S.EV_FETCH, epoch, start, dur, b, arg=S.FETCH_STOP)
                else:
                    _rec(w, S.EV_EXHAUSTED, epoch, start, dur, b)
                _rec(w, S.EV_PUT, epoch, start + dur, 50_000, b)
                _rec(main, S.EV_ARRIVE, epoch, start + dur + MS, 0, b, arg=0 if legacy else S.ARRIVE_EXHAUSTED)
                t += dur + 2 * MS
            else:  # the failed batch
                dur = 500 * MS
                _rec(w, S.EV_SAMPLE, epoch, start + MS, 301 * MS, b, 2 * b)
                _rec(w, crop[k], epoch, start + MS, 300 * MS, b, 2 * b)
                _rec(w, S.EV_FETCH, epoch, start, dur, b, arg=S.FETCH_ERROR)
                _rec(w, S.EV_PUT, epoch, start + dur, 50_000, b)
                _rec(main, S.EV_WAIT, epoch, start, 900 * MS, b)
                _rec(main, S.EV_ARRIVE, epoch, start + dur + MS, 0, b)
                t += 901 * MS
        _rec(main, S.EV_EPOCH_END, epoch, t)
        t += 50 * MS
    for w in (main, *workers.values()):
        w.close()
    return d
