"""Synthetic traces of a simulated input pipeline, in lotus's format and the original LotusTrace format.

For benchmarks and tests: the discrete-event model of torch's DataLoader of :mod:`lotus.sim`
(workers picked round robin, ``prefetch_factor`` batches in flight per worker, in-order delivery, a
training step of fixed mean length, optionally a CPU limit) produces every event lotus records, with
per-sample load/op times drawn from log-normal distributions around the means of the original study
(ImageNet, ResNet-18, b128)::

    from lotus.trace.synthetic import PipelineSpec, write_native, write_original
    spec = PipelineSpec(n_batches=50, n_workers=4, batch_size=32)
    write_native("runs/synth", spec)          # lotus-r0-main-p....lotustrace + one file per worker/epoch
    write_original("runs/synth_2023", spec)   # custom_log_{main,worker}_pid_<pid>

Everything is vectorised with numpy (a 5M-event trace is written in a few seconds).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from lotus.trace import schema as S
from lotus.trace.simulated import (
    _NATIVE_PER_SAMPLE_FIXED,
    DEFAULT_OPS_MS,
    PipelineSpec,
    SimEpoch,
    iter_simulate,
    simulate,
    spec_for_events,
)

_MONO_OFFSET_NS = 1_690_000_000_000_000_000  # wall - monotonic of the simulated host


# Synthetic files are written in the layout of format 1 (per item: load, transform and sample records,
# every batch in full detail), and say so: the readers read them as the files lotus <= 0.2 wrote.
LAYOUT_VERSION = 1

def _records(n: int) -> np.ndarray:
    rec = np.zeros(n, S.RECORD_DTYPE)
    rec["batch_id"] = -1
    rec["sample"] = -1
    return rec


def _fill(rec, sl, name_id, epoch, start_wall, dur, batch=-1, sample=-1, arg=0) -> None:
    rec["name_id"][sl] = name_id
    rec["epoch"][sl] = epoch
    rec["start_ns"][sl] = np.asarray(start_wall) - _MONO_OFFSET_NS
    rec["dur_ns"][sl] = dur
    rec["batch_id"][sl] = batch
    rec["sample"][sl] = sample
    rec["arg"][sl] = arg


def _interleave(*cols: np.ndarray) -> np.ndarray:
    """Columns of equal shape (B,) -> one array of shape (B*k,), row-major: a0 b0 c0 a1 b1 c1 ..."""
    return np.stack(cols, axis=-1).reshape(-1)


def _header(role: str, pid: int, rank: int, world: int, worker_id: int, anchor_wall: int, node: int | None = None
            ) -> bytes:
    header = {
        "format": "lotus-trace", "version": LAYOUT_VERSION, "role": role, "pid": pid, "rank": rank,
        "world_size": world, "worker_id": worker_id, "hostname": "synthetic" if node is None else f"node{node:02d}",
        "boot_id": "synthetic-boot" if node is None else f"synthetic-boot-{node}",
        "anchor_wall_ns": int(anchor_wall), "anchor_mono_ns": int(anchor_wall - _MONO_OFFSET_NS),
        "clock": "monotonic", "lotus_version": "synthetic", "torch_version": None, "argv": ["synthetic"],
        "builtin_events": {e.id: e.name for e in S.BUILTIN_EVENTS},
    }
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return S.PREAMBLE.pack(S.MAGIC, len(raw), S.RECORD_SIZE) + raw


def _define(namespace: int, key: int, text: str) -> bytes:
    raw = text.encode()
    out = b""
    for i in range(0, max(len(raw), 1), S.PAYLOAD_BYTES):
        chunk = raw[i: i + S.PAYLOAD_BYTES].ljust(S.PAYLOAD_BYTES, b"\0")
        out += S.RECORD.pack(S.CTRL_DEFINE, namespace, key, 0, 0, 0, 0, 0)[:8] + chunk
    return out


def _end(wall_ns: int) -> bytes:
    return S.RECORD.pack(S.CTRL_END, 0, 0, wall_ns - _MONO_OFFSET_NS, 0, 0, 0, wall_ns)


def _write(path: Path, parts: list[bytes | np.ndarray]) -> None:
    if path.name.endswith(".zst"):  # as lotus compact writes them (zstd through pyarrow)
        import pyarrow as pa

        opened = pa.output_stream(str(path), compression="zstd", buffer_size=1 << 20)
    else:
        opened = open(path, "wb")  # noqa: SIM115 - closed by the with below
    with opened as f:
        for p in parts:
            f.write(p if isinstance(p, bytes) else memoryview(np.ascontiguousarray(p)).cast("B"))


def _worker_records(spec: PipelineSpec, ep: SimEpoch, w: int) -> np.ndarray:
    idx = np.flatnonzero(ep.worker_of == w)
    nb, bs, n_ops = len(idx), spec.batch_size, len(spec.ops_ms)
    per_sample = _NATIVE_PER_SAMPLE_FIXED + n_ops
    n = nb * (3 + bs * per_sample) + 2
    rec = _records(n)
    # layout per batch: fetch, [sample, load, transform, op...] * bs, collate, put
    per_batch = 3 + bs * per_sample
    base = np.arange(nb) * per_batch + 1
    e = ep.epoch
    _fill(rec, 0, S.EV_WORKER_START, e, ep.worker_start_ns[w], 0, arg=w)
    _fill(rec, base, S.EV_FETCH, e, ep.prep_start_ns[idx], ep.prep_dur_ns[idx], idx, -1, 0)
    sstart = ep.sample_start_ns[idx]  # (nb, bs)
    load = ep.load_dur_ns[idx]
    ops = ep.op_dur_ns[idx]
    tr_start = sstart + load + 2_000
    tr_dur = ops.sum(axis=2) + 2_000 * max(n_ops - 1, 0)
    sample_dur = tr_start + tr_dur - sstart
    batch = np.broadcast_to(idx[:, None], (nb, bs))
    sample_idx = batch * bs + np.arange(bs)[None, :]
    s_pos = base[:, None] + 1 + np.arange(bs)[None, :] * per_sample  # (nb, bs)
    _fill(rec, s_pos.ravel(), S.EV_SAMPLE, e, sstart.ravel(), sample_dur.ravel(), batch.ravel(), sample_idx.ravel())
    _fill(rec, (s_pos + 1).ravel(), S.EV_LOAD, e, sstart.ravel(), load.ravel(), batch.ravel(), sample_idx.ravel())
    _fill(rec, (s_pos + 2).ravel(), S.EV_TRANSFORM, e, tr_start.ravel(), tr_dur.ravel(), batch.ravel(),
          sample_idx.ravel())
    op_start = tr_start.copy()
    for k in range(n_ops):
        _fill(rec, (s_pos + 3 + k).ravel(), S.FIRST_DYNAMIC_ID + k, e, op_start.ravel(), ops[:, :, k].ravel(),
              batch.ravel(), sample_idx.ravel())
        op_start = op_start + ops[:, :, k] + 2_000
    _fill(rec, base + per_batch - 2, S.EV_COLLATE, e, ep.collate_start_ns[idx], ep.collate_dur_ns[idx], idx, -1, bs)
    put_start = ep.prep_start_ns[idx] + ep.prep_dur_ns[idx] - ep.put_dur_ns[idx]
    _fill(rec, base + per_batch - 1, S.EV_PUT, e, put_start, ep.put_dur_ns[idx], idx)
    _fill(rec, n - 1, S.EV_WORKER_END, e, ep.worker_end_ns[w], 0, arg=w)
    return rec


def _main_records(ep: SimEpoch) -> np.ndarray:
    nb = len(ep.dispatch_ns)
    idx = np.arange(nb)
    rec = _records(2 + 5 * nb)
    e = ep.epoch
    _fill(rec, 0, S.EV_EPOCH_START, e, ep.epoch_start_ns, 0, arg=len(ep.worker_pids))
    # chronological enough: dispatch, wait, arrive, consumed, step per batch
    body = _records(5 * nb).reshape(nb, 5)
    for j, (nid, start, dur, arg) in enumerate((
        (S.EV_DISPATCH, ep.dispatch_ns, ep.dispatch_dur_ns, ep.worker_of),
        (S.EV_WAIT, ep.wait_start_ns, ep.wait_dur_ns, ep.buffered.astype(np.int64)),
        (S.EV_ARRIVE, ep.arrive_ns, 0, 0),
        (S.EV_CONSUMED, ep.consumed_ns, 0, 0),
        (S.EV_STEP, ep.consumed_ns, ep.step_dur_ns, 0),
    )):
        col = body[:, j]
        _fill(col, slice(None), nid, e, start, dur, idx, -1, arg)
        body[:, j] = col
    rec[1:-1] = body.reshape(-1)
    _fill(rec, len(rec) - 1, S.EV_EPOCH_END, e, ep.epoch_end_ns, 0)
    return rec


def write_native(directory: str | os.PathLike, spec: PipelineSpec | None = None, *,
                 ranks_per_node: int | None = None, compress: bool = False) -> list[Path]:
    """Write the simulated run as lotus trace files in ``directory``; returns the paths written.
    ``ranks_per_node``: a cluster's layout instead: rank r's files in ``node<NN>/`` (NN = r // ranks_per_node),
    written by host ``node<NN>`` (its own boot id). ``compress``: zstd-compressed files (``.lotustrace.zst``,
    as ``lotus compact`` writes them)."""
    suffix = S.FILE_SUFFIX + (".zst" if compress else "")
    spec = spec or PipelineSpec()
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)

    def node_of(rank: int) -> int | None:
        return None if ranks_per_node is None else rank // ranks_per_node

    def dir_of(rank: int) -> Path:
        out = root if ranks_per_node is None else root / f"node{node_of(rank):02d}"
        out.mkdir(parents=True, exist_ok=True)
        return out

    paths = []
    description = {"name": "synthetic", "dataset": "Synthetic", "dataset_len": spec.n_batches * spec.batch_size,
                   "batch_size": spec.batch_size, "num_workers": spec.n_workers,
                   "prefetch_factor": spec.prefetch_factor, "pin_memory": False, "persistent_workers": False,
                   "in_order": True, "drop_last": False, "sampler": "SequentialSampler"}
    if spec.cpus is not None:
        description["cpus_available"] = spec.cpus
    op_defs = b"".join(_define(S.NS_EVENT_NAME, S.FIRST_DYNAMIC_ID + k, name) for k, name in enumerate(spec.ops_ms))
    main_paths: list[Path] = []
    mains: dict[int, list] = {}  # rank -> (main pid, anchor, main records per epoch, last epoch's end)
    for ep in iter_simulate(spec):  # one epoch in memory at a time: its workers' files are written at once
        m = mains.setdefault(ep.rank, [ep.main_pid, ep.epoch_start_ns - 5_000_000, [], 0])
        m[2].append(_main_records(ep))
        m[3] = ep.epoch_end_ns
        for w, wpid in enumerate(ep.worker_pids):
            rec = _worker_records(spec, ep, w)
            p = dir_of(ep.rank) / f"lotus-r{ep.rank}-w{w}-p{wpid}{suffix}"
            _write(p, [_header("worker", wpid, ep.rank, spec.ranks, w, int(ep.worker_start_ns[w]) - 1_000,
                               node_of(ep.rank)),
                       op_defs, rec, _end(int(ep.worker_end_ns[w]) + 1_000)])
            paths.append(p)
    for rank, (main_pid, anchor, recs, end_ns) in sorted(mains.items()):
        p = dir_of(rank) / f"lotus-r{rank}-main-p{main_pid}{suffix}"
        _write(p, [_header("main", main_pid, rank, spec.ranks, -1, anchor, node_of(rank)),
                   _define(S.NS_LOADER, 0, json.dumps(description)), *recs, _end(end_ns + 1_000)])
        main_paths.append(p)
    return main_paths + paths


# -- original LotusTrace logs ----------------------------------------------------------------------------
def _write_lines(path: Path, names: list[str], code: np.ndarray, start: np.ndarray, dur: np.ndarray) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = pa.table({
        "name": pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32)), pa.array(names)),
        "start": pa.array(start.astype(np.int64)), "dur": pa.array(dur.astype(np.int64)),
    })
    table = table.set_column(0, "name", table.column("name").cast(pa.string()))
    pacsv.write_csv(table, path, pacsv.WriteOptions(include_header=False, quoting_style="none",
                                                     batch_size=1 << 16))


def write_original(directory: str | os.PathLike, spec: PipelineSpec | None = None, *,
                   with_wait: bool = True, prefix: str = "custom_log") -> list[Path]:
    """Write the simulated run as original LotusTrace logs (one rank, one epoch only).

    ``with_wait=False`` writes the older main files (``SBatchConsumed`` lines only, as in the study's
    published traces); otherwise ``SBatchWait`` lines too, 1000 ns for buffered batches.
    """
    spec = spec or PipelineSpec()
    if spec.ranks != 1 or spec.epochs != 1:
        raise ValueError("original LotusTrace logs hold one rank and one epoch")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (ep,) = simulate(spec)
    nb = len(ep.dispatch_ns)
    ids = np.arange(nb)
    paths = []
    # main file
    names = [f"SBatchConsumed_{i}" for i in range(nb)]
    if with_wait:
        names += [f"SBatchWait_{i}" for i in range(nb)]
        wait_dur = np.where(ep.buffered, 1000, ep.wait_dur_ns)
        code = _interleave(ids + nb, ids)
        start = _interleave(ep.wait_start_ns, ep.consumed_ns)
        dur = _interleave(wait_dur, np.full(nb, 1000))
    else:
        code, start, dur = ids, ep.consumed_ns, np.full(nb, 1000)
    p = d / f"{prefix}_main_pid_{ep.main_pid}"
    _write_lines(p, names, code, start, dur)
    paths.append(p)
    # worker files: per sample ops, SLoader, STransform; per batch SCollation, SBatchPreprocessed_<id>
    op_names = [f"S{o}" for o in spec.ops_ms]
    n_ops = len(op_names)
    bs = spec.batch_size
    for w, wpid in enumerate(ep.worker_pids):
        idx = np.flatnonzero(ep.worker_of == w)
        k = len(idx)
        names = [*op_names, "SLoader", "STransform", "SCollation"] + [f"SBatchPreprocessed_{i}" for i in idx]
        per_sample = n_ops + 2
        sstart = ep.sample_start_ns[idx]
        load = ep.load_dur_ns[idx]
        ops = ep.op_dur_ns[idx]
        tr_start = sstart + load + 2_000
        tr_dur = ops.sum(axis=2) + 2_000 * max(n_ops - 1, 0)
        op_start = np.concatenate([np.zeros((k, bs, 1), np.int64), np.cumsum(ops + 2_000, axis=2)[:, :, :-1]],
                                  axis=2) + tr_start[:, :, None]
        s_code = np.broadcast_to(np.arange(per_sample, dtype=np.int32), (k, bs, per_sample))
        s_start = np.concatenate([op_start, sstart[:, :, None], tr_start[:, :, None]], axis=2)
        s_dur = np.concatenate([ops, load[:, :, None], tr_dur[:, :, None]], axis=2)
        b_code = np.stack([np.full(k, n_ops + 2), n_ops + 3 + np.arange(k)], axis=1)
        b_start = np.stack([ep.collate_start_ns[idx], ep.prep_start_ns[idx]], axis=1)
        b_dur = np.stack([ep.collate_dur_ns[idx], ep.prep_dur_ns[idx]], axis=1)
        code = np.concatenate([s_code.reshape(k, -1), b_code], axis=1).ravel()
        start = np.concatenate([s_start.reshape(k, -1), b_start], axis=1).ravel()
        dur = np.concatenate([s_dur.reshape(k, -1), b_dur], axis=1).ravel()
        p = d / f"{prefix}_worker_pid_{wpid}"
        _write_lines(p, names, code, start, dur)
        paths.append(p)
    return paths


__all__ = ["DEFAULT_OPS_MS", "PipelineSpec", "SimEpoch", "simulate", "spec_for_events", "write_native",
           "write_original"]
