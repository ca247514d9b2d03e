"""A batch in transit, so the pin-memory thread's time on it can be measured.

With tracing and pinning on, the traced collate_fn returns ``PinEnvelope(batch)``. torch's pin
function calls ``.pin_memory()`` on objects that have it (public behaviour of
``DataLoader(pin_memory=True)`` for custom batch types), so the pin thread pins the batch through
:meth:`PinEnvelope.pin_memory`, which times it. The main-process iterator unwraps the envelope
before the training loop sees anything.
"""

from __future__ import annotations

import time


class PinEnvelope:
    __slots__ = ("data", "pin_end_ns", "pin_start_ns")

    def __init__(self, data, pin_start_ns: int = 0, pin_end_ns: int = 0):
        self.data = data
        self.pin_start_ns = pin_start_ns
        self.pin_end_ns = pin_end_ns

    def pin_memory(self, *args, **kwargs) -> PinEnvelope:
        from lotus.dataloader import _torch_compat as compat

        t0 = time.monotonic_ns()
        pinned = compat.pin_memory(self.data)
        return PinEnvelope(pinned, t0, time.monotonic_ns())

    def __reduce__(self):
        return (PinEnvelope, (self.data, self.pin_start_ns, self.pin_end_ns))
