"""Loader policies (lotus-only DataLoader keywords), tried by the original Lotus against GPU idle.

``worker_assignment``
    ``"round_robin"`` (torch): batch i goes to worker i mod N.
    ``"free_worker"``: the next batch goes to the worker with the fewest batches in flight
    (dispatched and not yet back), ties broken round-robin. A worker stuck on a slow batch stops
    receiving new ones while the others are idle.
``delivery_order``
    ``"in_order"`` (torch): the loop gets batch 0, 1, 2...; batches that arrive early wait.
    ``"lowest_ready_first"``: the loop gets the lowest-indexed batch that has already arrived; when
    none has, the first one to arrive. Dispatch stays as with ``in_order``.
    ``"arrival"``: torch's ``in_order=False`` (also changes how torch spreads batches over workers).

Every policy yields every sample of the epoch exactly once. They need worker processes:
with ``num_workers=0`` a non-default policy is a ``ValueError``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

ASSIGN_ROUND_ROBIN = "round_robin"
ASSIGN_FREE_WORKER = "free_worker"
DELIVERY_IN_ORDER = "in_order"
DELIVERY_LOWEST_READY = "lowest_ready_first"
DELIVERY_ARRIVAL = "arrival"
ASSIGNMENTS = (ASSIGN_ROUND_ROBIN, ASSIGN_FREE_WORKER)
DELIVERIES = (DELIVERY_IN_ORDER, DELIVERY_LOWEST_READY, DELIVERY_ARRIVAL)


@dataclass(frozen=True)
class Policy:
    assignment: str = ASSIGN_ROUND_ROBIN
    delivery: str = DELIVERY_IN_ORDER

    @property
    def default(self) -> bool:
        return self.assignment == ASSIGN_ROUND_ROBIN and self.delivery in (DELIVERY_IN_ORDER, DELIVERY_ARRIVAL)

    @property
    def free_worker(self) -> bool:
        return self.assignment == ASSIGN_FREE_WORKER

    @staticmethod
    def pick_worker(inflight: list[int], active: list[bool], start: int) -> int | None:
        """Active worker with the fewest batches in flight; ties go to the first at or after ``start``."""
        n = len(inflight)
        best = None
        for k in range(n):
            w = (start + k) % n
            if active[w] and (best is None or inflight[w] < inflight[best]):
                best = w
        return best

    @staticmethod
    def cycle_from(first: int, n: int):
        """An endless worker cycle that offers ``first`` first (what torch's dispatch loop reads)."""
        return itertools.chain([first], itertools.cycle(range(n)))


def resolve_policy(worker_assignment: str | None, delivery_order: str | None, in_order: bool | None,
                   num_workers: int) -> tuple[Policy, bool | None]:
    """Validate the keywords; returns the policy and the ``in_order`` value to give torch."""
    assignment = worker_assignment or ASSIGN_ROUND_ROBIN
    delivery = delivery_order or (DELIVERY_ARRIVAL if in_order is False else DELIVERY_IN_ORDER)
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"worker_assignment must be one of {ASSIGNMENTS}, got {worker_assignment!r}")
    if delivery not in DELIVERIES:
        raise ValueError(f"delivery_order must be one of {DELIVERIES}, got {delivery_order!r}")
    if delivery_order is not None and in_order is not None and (in_order is False) != (delivery == DELIVERY_ARRIVAL):
        raise ValueError(f"delivery_order={delivery_order!r} contradicts in_order={in_order!r}")
    policy = Policy(assignment, delivery)
    asked = (worker_assignment not in (None, ASSIGN_ROUND_ROBIN)
             or delivery_order not in (None, DELIVERY_IN_ORDER))
    if num_workers == 0 and asked:
        raise ValueError("worker_assignment and delivery_order need worker processes (num_workers > 0)")
    torch_in_order = in_order
    if delivery == DELIVERY_ARRIVAL:
        torch_in_order = False
    elif delivery_order is not None:
        torch_in_order = True if in_order is None else in_order
    return policy, torch_in_order
