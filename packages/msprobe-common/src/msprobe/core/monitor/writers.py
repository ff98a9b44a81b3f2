"""Writers of the monitor's metrics, one interface (:class:`MetricWriter`) for every format.

- ``csv``: upstream TrainerMon's layout, so its tools read our files: one file per metric group and block
  of ``step_count_per_record`` steps, ``{group}_{first}-{last}.csv``, with the columns
  ``vpp_stage,name,step[,micro_step],<ops...>,shape,dtype`` (micro_step for activations only);
- ``sqlite``: ``monitor.db``, one table ``metrics(metric, target, step, micro_step, rank, value)`` for trend
  queries over a whole run;
- ``tensorboard``: event files through the optional ``tensorboard`` package (:mod:`msprobe.core.monitor.tensorboard`).

Each step is written when it ends: appended CSV rows (one ``write`` each, fsynced) and one committed
SQLite transaction, so a crash loses at most the step in progress.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Protocol

from msprobe.core.fileio import append_csv_rows
from msprobe.core.monitor.records import MICRO_STEP_GROUPS, StepMetrics

DB_FILE = "monitor.db"


class MetricWriter(Protocol):
    def write(self, metrics: StepMetrics) -> None: ...

    def close(self) -> None: ...


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


class CsvWriter:
    def __init__(self, directory: Path, ndigits: int, steps_per_file: int) -> None:
        self.directory, self.ndigits, self.steps_per_file = directory, ndigits, steps_per_file

    def path(self, group: str, step: int) -> Path:
        first = step - step % self.steps_per_file
        return self.directory / f"{group}_{first}-{first + self.steps_per_file - 1}.csv"

    def write(self, metrics: StepMetrics) -> None:
        by_group: dict[str, list] = defaultdict(list)
        for row in metrics.rows:
            micro = [row.micro_step] if row.group in MICRO_STEP_GROUPS else []
            values = [round(value, self.ndigits) for value in row.values]
            by_group[row.group].append(
                [row.vpp_stage, row.name, metrics.step, *micro, *values, _shape_text(row.shape), row.dtype]
            )
        for group, rows in by_group.items():
            micro = ["micro_step"] if group in MICRO_STEP_GROUPS else []
            header = ["vpp_stage", "name", "step", *micro, *metrics.ops, "shape", "dtype"]
            append_csv_rows(self.path(group, metrics.step), header, rows)

    def close(self) -> None:
        pass


class SqliteWriter:
    def __init__(self, directory: Path) -> None:
        self.connection = sqlite3.connect(directory / DB_FILE)
        self.connection.execute(
            "CREATE TABLE IF NOT EXISTS metrics (metric TEXT, target TEXT, step INTEGER, micro_step INTEGER,"
            " rank INTEGER, value REAL)"
        )
        self.connection.commit()

    def write(self, metrics: StepMetrics) -> None:
        rows = [
            (f"{row.group}.{op}", row.name, metrics.step, row.micro_step, metrics.rank, value)
            for row in metrics.rows
            for op, value in zip(metrics.ops, row.values)
        ]
        with self.connection:
            self.connection.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        self.connection.close()


def open_writers(formats: tuple[str, ...], directory: Path, ndigits: int, steps_per_file: int) -> list[MetricWriter]:
    writers: list[MetricWriter] = []
    for name in formats:
        if name == "csv":
            writers.append(CsvWriter(directory, ndigits, steps_per_file))
        elif name == "sqlite":
            writers.append(SqliteWriter(directory))
        else:
            from msprobe.core.monitor.tensorboard import TensorBoardWriter

            writers.append(TensorBoardWriter(directory))
    return writers
