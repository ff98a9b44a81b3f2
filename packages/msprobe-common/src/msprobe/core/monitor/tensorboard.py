"""TensorBoard event files for the monitor (``"format": "tensorboard"``), through the ``tensorboard``
package's own event-file writer (optional: ``pip install msprobe-common[monitor-tb]``).

One scalar per metric and step, tagged ``{group}_{op}/{name}`` (``actv_norm/model.layers.0.mlp.output``,
with ``:{micro_step}`` after activations' names), so TensorBoard groups a metric's modules on one card;
each rank's folder is a run of its own. Values are TensorBoard's float32 scalars.
"""

from __future__ import annotations

import time
from pathlib import Path

from msprobe.core.monitor.records import MICRO_STEP_GROUPS, StepMetrics


def _modules():
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise ImportError(
            'monitor "format": "tensorboard" needs the tensorboard package: pip install msprobe-common[monitor-tb]'
        ) from None
    return Event, Summary, EventFileWriter


class TensorBoardWriter:
    def __init__(self, directory: Path) -> None:
        self.Event, self.Summary, writer_class = _modules()
        self.writer = writer_class(str(directory))

    def write(self, metrics: StepMetrics) -> None:
        values = [
            self.Summary.Value(tag=f"{row.group}_{op}/{row.target if row.group in MICRO_STEP_GROUPS else row.name}",
                               simple_value=value)
            for row in metrics.rows
            for op, value in zip(metrics.ops, row.values)
        ]
        self.writer.add_event(self.Event(wall_time=time.time(), step=metrics.step, summary=self.Summary(value=values)))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
