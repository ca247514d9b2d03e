"""Replay mode (``lotus stalls``' ingestion probe): the training loop gets already-prepared batches.

With ``LOTUS_REPLAY=K`` (set by the profilers through ``lotus.launch``), a traced iterator prepares
its first K batches as usual, keeps them, and then hands them out again, round robin, without loading
or preprocessing anything, until the epoch's length is reached. The loop then runs at the rate the
model/GPU can ingest data (DS-Analyzer's "synthetic data" run, without a special training script).
Replayed batches are the same objects each time (not copies): a loop that modifies its batch in place
sees its own modification again, which does not change the rate being measured. The trace records the
replayed batches' waits, hand-offs and steps as usual (their ``wait`` has the buffered flag; they have
no ``fetch``, and ids after every index dispatched before replay began); the loader description says
``replay_batches: K``.
"""

from __future__ import annotations


class Replay:
    """Replayed batches get ids after every index the iterator had dispatched when replay began
    (``first_id``), so they never share a key with a batch the workers prepared ahead."""

    __slots__ = ("cache", "epoch_len", "first_id", "k", "served")

    def __init__(self, k: int, epoch_len: int | None):
        self.k = max(1, int(k))
        self.epoch_len = epoch_len
        self.cache: list = []
        self.served = 0
        self.first_id = 0

    @property
    def ready(self) -> bool:
        return len(self.cache) >= self.k

    def keep(self, data, next_id: int) -> None:
        if len(self.cache) < self.k:
            self.cache.append(data)
            self.first_id = next_id

    def next(self) -> tuple[object, int]:
        """(batch, batch id) of the next replayed batch; StopIteration at the end of the epoch."""
        if self.epoch_len is not None and self.k + self.served >= self.epoch_len:
            raise StopIteration
        n = self.served
        self.served += 1
        return self.cache[n % self.k], self.first_id + n
