"""The lotus trace format, version 2: the contract between the loader and the analysis.

Documented for humans in docs/trace-format.md; this module is the single source of the numbers.
No numpy/pandas here: worker processes import it on their hot path.

A trace file (one per process, ``*.lotustrace``) is::

    preamble   8 bytes  b"LOTUSTR1"
               4 bytes  uint32 LE: header length H in bytes (JSON, UTF-8, space-padded to a multiple of 8)
               4 bytes  uint32 LE: record size (48)
    header     H bytes  JSON object (see HEADER_KEYS)
    records    48 bytes each, little endian, until end of file:
               int16 name_id, int16 loader, int32 epoch,
               int64 start_ns, int64 dur_ns, int64 batch_id, int64 sample, int64 arg

``name_id >= 0`` is an event. Negative ids are control records (see CTRL_*).
Times are ``time.monotonic_ns()`` of the writing host; the header holds a wall-clock anchor.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FORMAT_VERSION = 6  # 2: per-sample detail by budget (fetch FETCH_DETAIL), one `sample` record per item;
# 3: a num_workers=0 batch as one pair of packed records (PACKED_MAIN_BATCH, expanded by the readers);
# 4: the scheduler's view where Linux gives it: `runq` per worker batch, `main_cpu` every few batches
# 5: a `runq` record's sample = the bytes its thread read from storage during the fetch (-1: unknown)
# 6: `batch_bytes` of the first batch of every BATCH_BYTES_EVERY (the tensors' bytes a collation made)
MAGIC = b"LOTUSTR1"
PREAMBLE = struct.Struct("<8sII")
RECORD = struct.Struct("<hhiqqqqq")
RECORD_SIZE = RECORD.size  # 48


def _writer_format() -> str:
    """The format the writers pack with: the very same bytes as RECORD, packed faster where it can be.

    Timestamps are large ints: CPython packs a multi-digit int as '<q' through a generic byte-array
    conversion, and as a native 'l' through a plain loop (about a third less per record). Native
    ('@', LP64 little-endian: long is 8 bytes, no padding after 'hhi') where that gives RECORD's bytes;
    RECORD's own format elsewhere."""
    native = "@hhilllll"
    try:
        probe = (-3, 7, -2, 2**62 + 12345, -(2**40), 2**33, -1, 5)
        if struct.calcsize(native) == RECORD.size and struct.pack(native, *probe) == RECORD.pack(*probe):
            return native[1:]
    except struct.error:
        pass
    return RECORD.format.lstrip("<@=")


_WF = _writer_format()
PACK = struct.Struct(("@" if _WF.endswith("l") else "<") + _WF).pack  # one record, RECORD's bytes
PACK2 = struct.Struct(("@" if _WF.endswith("l") else "<") + _WF * 2).pack  # two records in one append
PACK3 = struct.Struct(("@" if _WF.endswith("l") else "<") + _WF * 3).pack
HEADER = struct.Struct("<hhi")  # a record's name_id, loader, epoch: RECORD's first 8 bytes
# two records whose headers come pre-packed (HEADER's bytes): 10 ints per pair instead of 16
PACK2_HEADED = struct.Struct(("@" if _WF.endswith("l") else "<") + ("8s" + _WF[3:]) * 2).pack
PAYLOAD_BYTES = 40  # bytes of a control record after name_id/loader/epoch
FILE_SUFFIX = ".lotustrace"
ZST = ".zst"  # a zstd-compressed file or part (lotus compact, rotation)

# numpy dtype spec of a record (the reader builds np.dtype(RECORD_DTYPE)).
RECORD_DTYPE = [
    ("name_id", "<i2"),
    ("loader", "<i2"),
    ("epoch", "<i4"),
    ("start_ns", "<i8"),
    ("dur_ns", "<i8"),
    ("batch_id", "<i8"),
    ("sample", "<i8"),
    ("arg", "<i8"),
]

# Control records (name_id < 0).
CTRL_DEFINE = -2  # define a string: loader field = namespace, epoch field = key, 40-byte payload chunk
CTRL_END = -3  # clean close: start_ns = monotonic ns at close, arg = wall-clock ns at close

# Namespaces of CTRL_DEFINE (chunks with the same namespace+key are concatenated in file order).
NS_EVENT_NAME = 0  # key = event name id (dynamic ops), payload = UTF-8 name
NS_LOADER = 1  # key = loader id, payload = UTF-8 JSON describing the DataLoader
NS_META = 2  # key = 0, payload = UTF-8 JSON with extra process metadata

# First id handed out to dynamically named events (ops named after the user's transforms).
FIRST_DYNAMIC_ID = 64
MAX_NAME_ID = 32767

# arg bit flags of the `wait` event
WAIT_BUFFERED = 1  # the batch had already arrived (out of order) when the loop asked for it
# arg bit flags of the `fetch` event
FETCH_ERROR = 1  # the worker raised; the exception went to the main process
FETCH_STOP = 2  # IterableDataset exhausted (files of lotus <= 0.1; now an `exhausted` event)
FETCH_DETAIL = 4  # version >= 2: the batch carries per-sample/per-op records (a detail batch)
# version >= 2: `sample` arg = load time of the item in ns (its start to its first transform); -1 when no
# transform ran. `load` and `transform` are not written: the readers derive them (see docs/trace-format.md)
DERIVED_FROM_SAMPLE = 2  # first format version whose files carry no load/transform records
# version >= 3, num_workers=0: a batch's dispatch, collate, fetch, the previous batch's step, its wait and
# consumed are written as two adjacent records, expanded by the readers into those events (in that order,
# field for field what version 2 wrote; docs/trace-format.md "Packed records"):
#   EV_MAIN_BATCH: start_ns = dispatch start, dur_ns = dispatch + fetch, batch_id, sample = dispatch duration,
#                  arg = collation start - dispatch start (-1: no collation; it ends with the fetch)
#   EV_MAIN_LOOP:  start_ns = wait start, dur_ns = wait, batch_id = previous batch (-1: none),
#                  sample = the previous batch's hand-off ns (0: none; its step ends at the wait start),
#                  arg = fetch flags | (collated items + 1) << 32
PACKED_MAIN_BATCH = 3  # first format version that may hold them
EV_MAIN_BATCH = 30
EV_MAIN_LOOP = 31
MAIN_ITEMS_SHIFT = 32
# arg of the `epoch_end` event: how the epoch ended
EPOCH_EXHAUSTED = 0  # the iterator ran out (the whole epoch was consumed)
EPOCH_ABANDONED = 1  # the iterator was dropped first (loop break, garbage-collected iterator, deleted loader)
EPOCH_PROBE_END = 2  # `lotus run --steps N` ended the job after N consumed batches
# arg bit flags of the `arrive` event
ARRIVE_EXHAUSTED = 1  # what arrived was a worker's "exhausted" message, not a batch

NO_ID = -1  # batch_id / sample / worker_id when not applicable


@dataclass(frozen=True)
class EventKind:
    """A built-in event: its id in the file, name, category and what its fields mean."""

    id: int
    name: str
    cat: str  # main | pin | worker-batch | sample | op | gpu | marker
    doc: str


BUILTIN_EVENTS: tuple[EventKind, ...] = (
    EventKind(0, "dispatch", "main", "main hands batch_id to a worker: sampler next() + index put; arg = worker id"),
    EventKind(1, "wait", "main", "training loop waits in __next__ for batch_id; arg bit 0 = was already buffered"),
    EventKind(2, "consumed", "main", "batch_id handed to the training loop (instant)"),
    EventKind(3, "pin", "pin", "pin-memory thread copies batch_id to pinned memory"),
    EventKind(4, "arrive", "main", "batch_id received by the main process from the worker queue (instant)"),
    EventKind(5, "step", "main", "training loop holds batch_id: from hand-off until it asks for the next batch"),
    EventKind(6, "fetch", "batch", "worker prepares batch_id: index received to result put; arg = flags"),
    EventKind(7, "sample", "sample", "one dataset item (__getitem__ / next()); sample = dataset index"),
    EventKind(8, "load", "sample", "load part of an item: item start until its first transform"),
    EventKind(9, "transform", "sample", "all transforms of an item (first op start to last op end)"),
    EventKind(10, "collate", "batch", "collate_fn of batch_id; arg = number of samples"),
    EventKind(11, "put", "batch", "worker puts batch_id on the result queue"),
    EventKind(12, "epoch_start", "marker", "iterator (re)started: epoch begins (instant); arg = num_workers"),
    EventKind(13, "epoch_end", "marker",
              "epoch ended (instant); arg = 0 iterator exhausted, 1 abandoned early, 2 probe end (--steps)"),
    EventKind(14, "worker_start", "marker", "worker process began (instant); arg = worker id"),
    EventKind(15, "worker_end", "marker", "worker loop returned (instant)"),
    EventKind(16, "gpu_wait", "gpu", "GPU time between the two CUDA events around the loop's wait for batch_id"),
    EventKind(17, "gpu_step", "gpu", "GPU time of the step that consumed batch_id (hand-off to next request)"),
    EventKind(18, "gpu_util", "gpu", "telemetry sample: arg = GPU utilisation %"),
    EventKind(19, "gpu_power", "gpu", "telemetry sample: arg = power in mW"),
    EventKind(20, "gpu_energy", "gpu", "telemetry sample: arg = energy counter in mJ"),
    EventKind(21, "gpu_sm_clock", "gpu", "telemetry sample: arg = SM clock in MHz"),
    EventKind(22, "gpu_mem_clock", "gpu", "telemetry sample: arg = memory clock in MHz"),
    EventKind(23, "user_step", "main", "lotus.step() region: explicit training step boundaries"),
    EventKind(24, "exhausted", "marker",
              "a worker's fetch of batch_id found its IterableDataset exhausted: no batch was made "
              "(dur = time spent finding out); never a batch row"),
    EventKind(25, "workers_set", "marker", "num_workers='auto' chose arg workers for the epoch about to start"),
    EventKind(26, "runq", "batch",
              "the worker's thread during its fetch of batch_id (start = the fetch's start): dur = time it was "
              "runnable but waiting for a CPU (run-queue delay), arg = time it ran on a CPU (Linux schedstat), "
              "sample = bytes it read from storage (version >= 5, Linux /proc/thread-self/io; -1: unknown)"),
    EventKind(27, "main_cpu", "marker",
              "main process CPU so far (instant, every MAIN_CPU_EVERY hand-offs of a loader with workers): "
              "arg = CPU ns of all its threads, "
              "sample = the loop thread's run-queue delay ns so far (-1: unknown), batch_id = the batch handed off"),
    EventKind(28, "batch_bytes", "marker",
              "the bytes of the tensors the collation of batch_id made (instant at its end; version >= 6, batch "
              "ids divisible by BATCH_BYTES_EVERY): arg = bytes (-1: no tensor found)"),
)

EVENTS_BY_NAME: dict[str, EventKind] = {e.name: e for e in BUILTIN_EVENTS}
EVENTS_BY_ID: dict[int, EventKind] = {e.id: e for e in BUILTIN_EVENTS}
OP_CAT = "op"  # category of dynamically named events (per-sample ops)

# Ids as module constants for the hot paths.
EV_DISPATCH = 0
EV_WAIT = 1
EV_CONSUMED = 2
EV_PIN = 3
EV_ARRIVE = 4
EV_STEP = 5
EV_FETCH = 6
EV_SAMPLE = 7
EV_LOAD = 8
EV_TRANSFORM = 9
EV_COLLATE = 10
EV_PUT = 11
EV_EPOCH_START = 12
EV_EPOCH_END = 13
EV_WORKER_START = 14
EV_WORKER_END = 15
EV_GPU_WAIT = 16
EV_GPU_STEP = 17
EV_GPU_UTIL = 18
EV_GPU_POWER = 19
EV_GPU_ENERGY = 20
EV_GPU_SM_CLOCK = 21
EV_GPU_MEM_CLOCK = 22
EV_USER_STEP = 23
EV_EXHAUSTED = 24
EV_WORKERS_SET = 25
EV_RUNQ = 26
EV_MAIN_CPU = 27
MAIN_CPU_EVERY = 16  # hand-offs of a loader between two main_cpu records (its first hand-off records one)
EV_BATCH_BYTES = 28
BATCH_BYTES_EVERY = 64  # batch ids of a loader's epoch whose collated bytes are recorded: 0, 64, 128, ...

# Keys of the JSON header.
HEADER_KEYS = {
    "format": "'lotus-trace'",
    "version": "FORMAT_VERSION of the writer",
    "role": "'main' or 'worker'",
    "pid": "process id",
    "rank": "distributed rank (torch.distributed, else $RANK, else 0)",
    "world_size": "distributed world size",
    "worker_id": "DataLoader worker id (-1 in the main process)",
    "hostname": "host name",
    "boot_id": "kernel boot id: files with the same boot_id share one monotonic clock",
    "anchor_wall_ns": "time.time_ns() read next to anchor_mono_ns",
    "anchor_mono_ns": "time.monotonic_ns() at file creation",
    "clock": "'monotonic' (the clock of start_ns)",
    "lotus_version": "version of lotus that wrote the file",
    "torch_version": "torch version, when torch is imported",
    "builtin_events": "{id: name} of the built-in events of this version",
    "detail_budget_pct": "worker files (version >= 2): the per-sample detail budget in percent of the "
                         "pipeline's CPU; null: every batch in detail",
    "main_pid": "worker files: the pid of the process whose DataLoader started the worker (readers tell the "
                "loaders of several processes of one rank apart by it)",
}
