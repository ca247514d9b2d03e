"""TensorBoard: scalars through TensorBoard's own event file writer (the one ``torch.utils.tensorboard`` uses).

Events go to ``DIR/lotus/`` (a run of its own beside the job's ``SummaryWriter`` directory: two writers'
steps never interleave in one run), tags ``lotus/...`` (:func:`lotus.live.sinks.values.scalars`), global
step = the loop's batch count, wall time = the publish's.
"""

from __future__ import annotations

import os

from lotus.live.sinks.values import RunValues, scalars

SUBDIR = "lotus"


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.log_dir = os.path.join(os.fspath(log_dir), SUBDIR)
        self.writer = EventFileWriter(self.log_dir, max_queue_size=100, flush_secs=5, filename_suffix=".lotus")

    def publish(self, values: RunValues) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        tags = scalars(values)
        if not tags:
            return
        summary = Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in tags.items()])
        self.writer.add_event(Event(wall_time=values.wall_s, step=values.step, summary=summary))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
