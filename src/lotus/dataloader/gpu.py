"""GPU idle attributed to data loading: CUDA events around the training loop's wait, and telemetry.

:class:`CudaProbe` records one CUDA event on the current stream when the loop asks for the next
batch (start of ``__next__``) and one when it gets it. The GPU time between the two is GPU idle caused
by waiting for data: work queued before the request still runs (the first event completes only after
it), and nothing is queued until the batch arrives. Events are resolved lazily with ``query()``; the
hot path never synchronises. Per batch the trace gets ``gpu_wait`` (that idle) and ``gpu_step``
(GPU time from getting the batch to asking for the next one).

:func:`step` marks explicit step boundaries for loops where ``next(loader)`` is not one.
:class:`Telemetry` samples NVML (utilisation, clocks, power, energy) on the trace clock; read-only.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque

from lotus._warn import warn_once
from lotus.trace import schema as S

mono = time.monotonic_ns
_MAX_PENDING = 4096
_active = None  # weak reference to the LoaderTrace whose loader last handed a batch to the loop
_active_id = 0  # id() of that LoaderTrace (a per-batch check without calling the weak reference)


def set_active(lt) -> None:
    global _active, _active_id
    if _active is None or _active() is not lt:
        _active = weakref.ref(lt, _forget)
        _active_id = id(lt)


def _activate(ref) -> None:
    """torch initialises CUDA (compat.cuda_on_init): the probe of ``ref`` starts recording. Runs inside
    torch's init: flags only, never raises."""
    try:
        probe = ref()
        if probe is not None:
            probe.active = True
            probe.wanted = True
    except Exception:
        pass


def _forget(ref) -> None:
    """The active LoaderTrace was collected: its id may be reused by another one."""
    global _active, _active_id
    if _active is ref:
        _active, _active_id = None, 0


def _dead(*args) -> None:
    pass


class CudaProbe:
    """CUDA events around the loop's wait for each batch (see module doc)."""

    def __init__(self, lt):
        import torch

        # A weak reference: the LoaderTrace holds this probe, and a reference cycle holding CUDA events
        # must never outlive its loader as garbage, or a forked DataLoader worker would destroy those
        # events in its garbage collection (cudaErrorInitializationError, abort).
        self._lt = weakref.ref(lt)
        from lotus.dataloader import _torch_compat as compat

        self._cuda = torch.cuda
        self._stream_key = compat.cuda_stream_key  # None: ask torch.cuda.current_stream() every time
        self._stream_seen = None  # (key, Stream) of the current stream when last asked
        self._pool: list = []
        # (event id, batch, start event, end event, host start ns, epoch): the epoch of the batch, taken when
        # the event is queued; an event resolves later, often after the next epoch began (lt.epoch moved on)
        self._pending: deque = deque()
        self._req = None  # (event, host ns) of the request in flight
        self._last_got = None  # (batch, event, host ns, epoch) of the batch the loop holds
        self.active = False  # CUDA is initialised: events are recorded
        self._announced = False  # the loader was told (LoaderTrace.on_cuda_ready: telemetry)
        self.enabled = True  # lotus.step() turns the automatic probe off
        # Whether the iterators should call request()/got() at all. torch tells when it initialises CUDA
        # (compat.cuda_on_init): until then nothing is asked per batch. A torch without that queue: polled
        # per batch (is_initialized(), ~1-3 us of Python on the H100 host, the bulk of a plain batch's cost).
        self.wanted = True
        self._polling = True
        me = weakref.ref(self)
        if compat.cuda_on_init(lambda: _activate(me)):
            self._polling = False
            self.wanted = self.active

    def _ready(self) -> bool:
        if self.active:
            if not self._announced:
                self._announced = True
                lt = self._lt()
                if lt is not None:
                    lt.on_cuda_ready()
            return True
        # only whether CUDA is initialised yet: it is available (LoaderTrace.cuda_probe made this probe),
        # and torch.cuda.is_available() asks the driver again on every call (~6 us per batch, measured
        # on the H100 host, where a loop that never initialised CUDA asked it before every batch)
        if self._polling and self._cuda.is_initialized():
            self.active = True
            return self._ready()
        return False

    def _event(self):
        pool = self._pool
        ev = pool.pop() if pool else self._cuda.Event(enable_timing=True)
        ev.record(self._stream())
        return ev

    def _stream(self):
        """The current stream (what ``Event.record()`` uses), its Python object made only when it changed:
        ``torch.cuda.current_stream()`` costs ~4 us a call on the H100 host, the key it reads ~0.3 us."""
        key_of = self._stream_key
        if key_of is not None:
            try:
                key = key_of()
            except Exception:  # this torch lacks the private call: the public one every time
                self._stream_key = None
            else:
                seen = self._stream_seen
                if seen is not None and seen[0] == key:
                    return seen[1]
                stream = self._cuda.current_stream()
                self._stream_seen = (key, stream)
                return stream
        return self._cuda.current_stream()

    def request(self) -> None:
        if not self.enabled or not self._ready():
            return
        t = mono()
        ev = self._event()
        last = self._last_got
        if last is not None:
            self._pending.append((S.EV_GPU_STEP, last[0], last[1], ev, last[2], last[3]))
            self._last_got = None
        self._req = (ev, t)
        self.resolve()

    def got(self, batch: int) -> None:
        req = self._req
        if req is None or not self.enabled:
            return
        self._req = None
        ev = self._event()
        lt = self._lt()
        epoch = lt.epoch if lt is not None else -1
        self._pending.append((S.EV_GPU_WAIT, batch, req[0], ev, req[1], epoch))
        self._last_got = (batch, ev, mono(), epoch)
        if len(self._pending) > _MAX_PENDING:  # the GPU is far behind: drop the oldest, stay bounded
            self._pending.popleft()

    def finish(self) -> None:
        """End of an epoch: the next epoch's first request does not close this epoch's last step."""
        self._last_got = None
        self._req = None
        self.resolve()

    def resolve(self, block: bool = False) -> None:
        pending = self._pending
        lt = self._lt()
        record = lt.record_in if lt is not None else _dead
        while pending:
            nid, batch, a, b, host, epoch = pending[0]
            if block:
                b.synchronize()
            elif not b.query():
                return
            pending.popleft()
            try:
                ns = int(a.elapsed_time(b) * 1e6)
                record(epoch, nid, host, ns, batch, S.NO_ID, 1)
            except Exception as exc:  # e.g. an event never recorded on this device
                warn_once("cuda-event", f"lotus: a CUDA event could not be timed ({exc!r})")
            if b is not a and len(self._pool) < 64:
                self._pool.append(a)

    def close(self) -> None:
        try:
            self.resolve(block=True)
        except Exception:
            pass


@contextlib.contextmanager
def step():
    """Mark one training step explicitly (``with lotus.step(): ...``).

    For loops whose step is not delimited by ``next(loader)`` (prefetchers, gradient accumulation).
    Records a ``user_step`` event and, with CUDA, ``gpu_step`` (GPU time inside the step) and
    ``gpu_wait`` (GPU time between the previous step's end and this step's start), attributed to the
    batch the loader handed out last. The loader's automatic CUDA events are turned off meanwhile.
    Without a traced loader it does nothing.
    """
    lt = _active() if _active is not None else None
    if lt is None or not lt.on:
        yield
        return
    st = lt.user_steps()
    st.begin()
    try:
        yield
    finally:
        st.end()


class UserSteps:
    """State of lotus.step() regions for one loader."""

    def __init__(self, lt, probe: CudaProbe | None):
        self._lt = weakref.ref(lt)  # see CudaProbe: no reference cycle with the LoaderTrace
        self.probe = probe
        self._t0 = 0
        self._ev0 = None
        self._prev_end = None  # (event, host ns) of the last step's end
        if probe is not None:
            probe.enabled = False

    def begin(self) -> None:
        self._t0 = mono()
        probe = self.probe
        if probe is not None and probe._ready():
            self._ev0 = probe._event()
            prev = self._prev_end
            lt = self._lt()
            if prev is not None and lt is not None:
                probe._pending.append((S.EV_GPU_WAIT, lt.last_batch, prev[0], self._ev0, prev[1], lt.epoch))

    def end(self) -> None:
        t1 = mono()
        lt = self._lt()
        if lt is None:
            return
        try:
            lt.record(S.EV_USER_STEP, self._t0, t1 - self._t0, lt.last_batch, S.NO_ID, 0)
            probe = self.probe
            if probe is not None and self._ev0 is not None:
                ev1 = probe._event()
                probe._pending.append((S.EV_GPU_STEP, lt.last_batch, self._ev0, ev1, self._t0, lt.epoch))
                self._prev_end = (ev1, t1)
                probe.resolve()
        except Exception as exc:
            lt.fail("step", exc)


class Telemetry(threading.Thread):
    """NVML sampler: GPU utilisation, SM/memory clocks, power and energy on the trace clock."""

    def __init__(self, lt, device_index: int, interval_s: float = 0.05):
        super().__init__(name="lotus-gpu-telemetry", daemon=True)
        import pynvml

        self.nvml = pynvml
        self.lt = lt
        self.interval_s = interval_s
        self._stop = threading.Event()
        pynvml.nvmlInit()
        self.handle = _nvml_handle(pynvml, device_index)

    def run(self) -> None:
        nv, h, lt = self.nvml, self.handle, self.lt
        sm, mem = nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM
        energy_ok = power_ok = True
        while not self._stop.wait(self.interval_s) and lt.on:
            t = mono()
            try:
                lt.record(S.EV_GPU_UTIL, t, 0, S.NO_ID, S.NO_ID, nv.nvmlDeviceGetUtilizationRates(h).gpu)
                lt.record(S.EV_GPU_SM_CLOCK, t, 0, S.NO_ID, S.NO_ID, nv.nvmlDeviceGetClockInfo(h, sm))
                lt.record(S.EV_GPU_MEM_CLOCK, t, 0, S.NO_ID, S.NO_ID, nv.nvmlDeviceGetClockInfo(h, mem))
                if power_ok:
                    try:
                        lt.record(S.EV_GPU_POWER, t, 0, S.NO_ID, S.NO_ID, nv.nvmlDeviceGetPowerUsage(h))
                    except nv.NVMLError:
                        power_ok = False
                if energy_ok:
                    try:
                        lt.record(S.EV_GPU_ENERGY, t, 0, S.NO_ID, S.NO_ID,
                                  nv.nvmlDeviceGetTotalEnergyConsumption(h))
                    except nv.NVMLError:
                        energy_ok = False
            except Exception as exc:
                warn_once("telemetry", f"lotus: GPU telemetry stopped ({exc!r})")
                return

    def stop(self) -> None:
        self._stop.set()


def _nvml_handle(nv, device_index: int):
    """The NVML handle of torch's CUDA device ``device_index`` (by UUID, so CUDA_VISIBLE_DEVICES is honoured)."""
    import torch

    try:
        uuid = str(torch.cuda.get_device_properties(device_index).uuid)
        return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        return nv.nvmlDeviceGetHandleByIndex(device_index)
