"""What ``lotus report`` and ``lotus plot`` need of a scanned run's op records, kept during the scan itself
(issue 25: one pass over the files), instead of reading the files again (:mod:`lotus.trace.rescan`):

* per batch key (rank, loader, epoch, batch id) and op slot: the integer sum of the op durations, and per
  batch key the number of op records (:class:`OpReduce`'s groups): the trends' per-epoch and per-bucket op
  totals of :mod:`lotus.analysis.trends` (a bucket is known only once the batches table is), and whether
  the excluded batches (failed or exhausted fetches) hold any op at all;
* every op duration, per op slot in file order, written to a temporary file (:class:`OpValues`, in
  ``$LOTUS_SPILL_DIR`` or the temporary directory, 8 bytes an op record): the figures' op samples
  (:func:`lotus.analysis.scanops.op_samples` picks the values ``rng.choice`` would, by index, reading the
  files back in blocks).

A part of a parallel scan keeps its own (in its op slots); :meth:`OpReduce.absorb` merges them in file
order (sums add up exactly: integers; the value files are concatenated in part order, the order of one
pass). The per-batch rows are blocks of :data:`BLOCK` batch ids in spilled arrays (:mod:`lotus.query.spill`:
their pages leave the resident set once written). The per-batch sums give up (``gave_up`` says why; the
users then read the files again, as before) where batch ids are too sparse for dense per-batch rows. Disk:
8 bytes per batch and op slot (at least 8 slots), 8 per batch, and 8 per op record for the values.
"""

from __future__ import annotations

import errno
import os
import tempfile
import weakref

import numpy as np

BLOCK = 1 << 12  # batch ids of a block of per-batch rows
SLOTS = 8  # op slots a block has room for at first
ROWS_SLACK = 1 << 16  # a group may allocate this many rows beyond 4 per op record seen (sparse ids: give up)
READ_BLOCK = 1 << 22  # values read back at once (32 MiB)


class OpReduce:
    """Per-batch op sums and the op values of (a part of) a scan (module doc)."""

    def __init__(self, values: bool):
        self.groups: dict[tuple[int, int, int], dict] = {}  # key -> {block: (sums (BLOCK, slots), ops (BLOCK,))}
        self.negative: dict[tuple[int, int, int], int] = {}  # ops with a batch id < 0, by group
        self.seen: dict[tuple[int, int, int], int] = {}
        self.gave_up: str | None = None
        self.values = OpValues() if values else None

    # -- during the scan ---------------------------------------------------------------------------------
    def add(self, rank: int, loader: np.ndarray, epoch: np.ndarray, batch_id: np.ndarray, slot: np.ndarray,
            dur: np.ndarray, slots: int) -> None:
        """One chunk's op records (their loader with the file's offset, epoch, batch id, slot, duration)."""
        if self.values is not None:
            self.values.add(slot, dur)
        if self.gave_up is not None or not len(slot):
            return
        lo_min, lo_max = int(loader.min()), int(loader.max())
        ep_min, ep_max = int(epoch.min()), int(epoch.max())
        if lo_min == lo_max and ep_min == ep_max:
            self._add_group((rank, lo_min, ep_min), batch_id, slot, dur, slots)
            return
        key = (loader.astype(np.int64) << 33) + (epoch.astype(np.int64) + (1 << 32))
        uniq, inv = np.unique(key, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        cuts = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
        for j, u in enumerate(uniq.tolist()):
            idx = order[cuts[j]: cuts[j + 1]]
            self._add_group((rank, u >> 33, (u & ((1 << 33) - 1)) - (1 << 32)), batch_id[idx], slot[idx], dur[idx],
                            slots)
            if self.gave_up is not None:
                return

    def _add_group(self, key, bid, slot, dur, slots: int) -> None:
        neg = bid < 0
        if neg.any():
            self.negative[key] = self.negative.get(key, 0) + int(neg.sum())
            keep = ~neg
            bid, slot, dur = bid[keep], slot[keep], dur[keep]
            if not len(bid):
                return
        self.seen[key] = self.seen.get(key, 0) + len(bid)
        bid = bid.astype(np.int64)
        lo, hi = int(bid.min()), int(bid.max())
        if hi + 1 > 4 * self.seen[key] + ROWS_SLACK:
            self._give_up(f"batch ids up to {hi} for {self.seen[key]} op records")
            return
        blocks = self.groups.setdefault(key, {})
        if lo // BLOCK == hi // BLOCK:  # as usual: one block of batch ids
            _block_add(blocks, lo // BLOCK, bid - lo // BLOCK * BLOCK, slot.astype(np.int64), dur, slots)
            return
        b = bid // BLOCK
        for bi in np.unique(b).tolist():
            sel = b == bi
            _block_add(blocks, bi, bid[sel] - bi * BLOCK, slot[sel].astype(np.int64), dur[sel], slots)

    def _give_up(self, why: str) -> None:
        self.gave_up = why
        self.groups, self.seen = {}, {}

    def finish(self) -> OpReduce:
        if self.values is not None:
            self.values.close()
        return self

    # -- merging the parts of a parallel scan ------------------------------------------------------------
    def absorb(self, part: OpReduce, where: np.ndarray, slots: int) -> None:
        """``part`` (later files), its slot k being this one's ``where[k]`` (of ``slots``)."""
        if self.values is not None:
            if part.values is None:
                self.values = None
            else:
                self.values.absorb(part.values, where)
        if part.gave_up is not None and self.gave_up is None:
            self._give_up(part.gave_up)
        for key, n in part.negative.items():
            self.negative[key] = self.negative.get(key, 0) + n
        if self.gave_up is not None:
            return
        for key, blocks in part.groups.items():
            mine = self.groups.setdefault(key, {})
            for bi, (sums, ops) in blocks.items():
                m = _block(mine, bi, slots)
                m[0][:, where[: sums.shape[1]]] += sums[:, : len(where)]
                m[1][:] += ops
                _drop(m)
        part.groups = {}

    # -- after the scan ----------------------------------------------------------------------------------
    def batch_sums(self):
        """``(rank, loader, epoch), batch ids, their per-slot sums`` (int64, one row per batch id with op
        records), a block of batch ids at a time; None where the sums gave up (sparse batch ids)."""
        if self.gave_up is not None:
            return None
        return self._iter_sums()

    def _iter_sums(self):
        for key, blocks in sorted(self.groups.items()):
            for bi, (sums, ops) in sorted(blocks.items()):
                ids = np.flatnonzero(ops > 0)
                if ids.size:
                    yield key, ids + bi * BLOCK, np.array(sums[ids])
                _drop((sums, ops))

    def ops_of(self, keys) -> int | None:
        """Op records of the batch keys ``keys`` (a frame with rank, loader, epoch, batch_id); None: unknown."""
        if self.gave_up is not None:
            return None
        total = 0
        for r, lo, e, b in keys[["rank", "loader", "epoch", "batch_id"]].drop_duplicates().to_numpy(np.int64).tolist():
            if b < 0:
                total += self.negative.get((r, lo, e), 0)
                continue
            blk = self.groups.get((r, lo, e), {}).get(b // BLOCK)
            if blk is not None:
                total += int(blk[1][b % BLOCK])
        return total


def _block(blocks: dict, bi: int, slots: int):
    """The block ``bi`` of a group, with room for ``slots`` op slots (spilled arrays: :mod:`lotus.query.spill`)."""
    from lotus.query import spill

    blk = blocks.get(bi)
    if blk is not None and blk[0].shape[1] >= slots:
        return blk
    width = max(slots, SLOTS)
    sums = spill.array(BLOCK * width, np.int64, 0).reshape(BLOCK, width)
    ops = spill.array(BLOCK, np.int64, 0)
    if blk is not None:
        sums[:, : blk[0].shape[1]] = blk[0]
        ops[:] = blk[1]
    blocks[bi] = (sums, ops)
    return blocks[bi]


def _block_add(blocks: dict, bi: int, row: np.ndarray, slot: np.ndarray, dur: np.ndarray, slots: int) -> None:
    sums, ops = _block(blocks, bi, slots)
    width = sums.shape[1]
    flat = row * width + slot
    sums.reshape(-1)[:] += np.bincount(flat, weights=dur.astype(np.float64),  # exact: integers < 2**53 ns
                                       minlength=BLOCK * width).astype(np.int64)
    ops += np.bincount(row, minlength=BLOCK)
    _drop((sums, ops))


def _drop(blk) -> None:
    from lotus.query import spill

    spill.drop(*blk)


_open = os.fdopen  # (tests: a full disk)


def _remove(paths: list[str], state: dict) -> None:
    if not state.get("owner"):
        return
    for p in paths:
        try:
            os.unlink(p)
        except OSError:
            pass


class OpValues:
    """Every op duration (int64 ns) of a scan, per op slot in file order, in temporary files (module doc).

    Files made by a worker process of a parallel scan are handed over with the part (pickled): the
    receiving process then owns them and removes them when this object goes (or at exit)."""

    def __init__(self):
        from lotus.query.spill import spill_dir

        self.where = spill_dir()
        self.segments: dict[int, list[tuple[str, int]]] = {}  # slot -> [(file, values)] in file order
        self._files: dict[int, object] = {}
        self._paths: list[str] = []
        self._state = {"owner": True}
        weakref.finalize(self, _remove, self._paths, self._state)

    def __getstate__(self):
        self.close()
        self._state["owner"] = False  # the receiver removes the files
        return {"where": self.where, "segments": self.segments, "paths": list(self._paths)}

    def __setstate__(self, st):
        self.where, self.segments = st["where"], st["segments"]
        self._files, self._paths, self._state = {}, list(st["paths"]), {"owner": True}
        weakref.finalize(self, _remove, self._paths, self._state)

    def _fail(self, exc: OSError):
        from lotus.query.spill import SpillError

        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise SpillError(f"no space left in {self.where} for the op durations kept for the figures; free some "
                             "or set $LOTUS_SPILL_DIR to a larger disk") from None
        raise SpillError(f"cannot write a temporary file in {self.where} ({exc.strerror}); "
                         "set $LOTUS_SPILL_DIR to a writable directory") from None

    def add(self, slot: np.ndarray, dur: np.ndarray) -> None:
        present = np.flatnonzero(np.bincount(slot)) if len(slot) else []
        for k in np.asarray(present).tolist():
            d = np.ascontiguousarray(dur[slot == k], dtype=np.int64)
            f = self._files.get(k)
            try:
                if f is None:
                    fd, path = tempfile.mkstemp(prefix="lotus-opvalues-", dir=self.where)
                    self._paths.append(path)
                    f = self._files[k] = _open(fd, "wb")
                    self.segments.setdefault(k, []).append((path, 0))
                f.write(d.data)
            except OSError as exc:
                self._fail(exc)
            path, n = self.segments[k][-1]
            self.segments[k][-1] = (path, n + len(d))

    def close(self) -> None:
        for f in self._files.values():
            try:
                f.close()
            except OSError as exc:
                self._fail(exc)
        self._files = {}

    def absorb(self, part: OpValues, where: np.ndarray) -> None:
        self.close()
        for k, segs in part.segments.items():
            self.segments.setdefault(int(where[k]), []).extend(segs)
        self._paths.extend(part._paths)
        part._state["owner"] = False
        part._paths.clear()

    def count(self, slot: int) -> int:
        return sum(n for _, n in self.segments.get(slot, []))

    def pick(self, slot: int, indices: np.ndarray) -> np.ndarray:
        """The values at ``indices`` (into the slot's values in file order), in the order of ``indices``."""
        self.close()
        order = np.argsort(indices, kind="stable")
        want = np.asarray(indices, np.int64)[order]
        out = np.empty(len(want), np.int64)
        base = 0
        for path, n in self.segments.get(slot, []):
            lo, hi = np.searchsorted(want, [base, base + n])
            for start in range(0, n, READ_BLOCK):
                a, b = np.searchsorted(want[lo:hi], [base + start, base + min(n, start + READ_BLOCK)]) + lo
                if a == b:
                    continue
                block = np.fromfile(path, np.int64, count=min(READ_BLOCK, n - start), offset=8 * start)
                out[order[a:b]] = block[want[a:b] - base - start]
            base += n
        return out
