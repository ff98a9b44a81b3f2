"""``statistic.csv`` in MindSpore's column layout, computed by msprobe from the kernel tensors
(docs/mindspore/dump.md#output-layout).

MindSpore computes these statistics itself only on GPU and Ascend; on CPU it saves whole tensors, so
msprobe reads each tensor once and writes the same columns, one row per kernel tensor in execution order.
Values are exact for the dtype (:func:`msprobe.core.dump.host_stats.array_stats`); bool tensors count as 0/1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from msprobe.core.dump.host_stats import array_stats
from msprobe.core.services.fileio import write_csv
from msprobe.mindspore.graph_dump.kernel_files import KernelFile

STATISTIC_CSV = "statistic.csv"
HEADER = (
    "Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size", "Data Type", "Shape",
    "Max Value", "Min Value", "Avg Value", "L2Norm Value",
)  # fmt: skip


def load_tensor(kernel_file: KernelFile) -> np.ndarray:
    return np.load(kernel_file.path, allow_pickle=False)


def _number(value: float | None) -> object:
    return "" if value is None else value


def statistic_row(kernel_file: KernelFile) -> list[object]:
    values = load_tensor(kernel_file)
    stats = array_stats(values.astype(np.uint8) if values.dtype == np.bool_ else values)
    return [
        kernel_file.op_type,
        kernel_file.op_name,
        kernel_file.task_id,
        kernel_file.stream_id,
        kernel_file.timestamp,
        kernel_file.io,
        kernel_file.slot,
        values.nbytes,
        kernel_file.dtype.lower(),
        "(" + ",".join(str(n) for n in values.shape) + ")",
        *(_number(v) for v in (stats.max, stats.min, stats.mean, stats.norm)),
    ]


def write_statistic_csv(directory: Path, kernel_files: list[KernelFile]) -> Path:
    """Write ``directory/statistic.csv`` for the ``.npy`` files among ``kernel_files`` (in their order)."""
    rows = [statistic_row(f) for f in kernel_files if f.path.suffix == ".npy"]
    target = directory / STATISTIC_CSV
    write_csv(target, HEADER, rows)
    return target
