"""Writers of the monitor's metrics, one interface (:class:`MetricWriter`) for every format.

- ``csv``: upstream TrainerMon's layout, so its tools read our files: one file per metric group and block
  of ``step_count_per_record`` steps, ``{group}_{first}-{last}.csv``, with the columns
  ``vpp_stage,name,step[,micro_step],<ops...>,shape,dtype`` (micro_step for activations only);
- ``sqlite``: ``monitor.db``, one table ``metrics(metric, target, step, micro_step, rank, value)`` for trend
  queries over a whole run;
- ``tensorboard``: event files through the optional ``tensorboard`` package (:mod:`msprobe.core.monitor.tensorboard`).

Each step is written when it ends: CSV rows appended and flushed, one committed SQLite transaction (WAL),
so a crashed training process loses at most the step in progress. Neither is fsynced (an fsync per file
per step cost more than computing the metrics, on a busy disk): what a step wrote is in the operating
system's hands when the step ends, so only a machine that loses power can lose the last steps.
"""

from __future__ import annotations

import csv
import io
import os
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Protocol, TextIO

from msprobe.core.monitor.records import MICRO_STEP_GROUPS, RowLayout, StepMetrics
from msprobe.core.services.fileio import FILE_MODE

DB_FILE = "monitor.db"


class MetricWriter(Protocol):
    def write(self, metrics: StepMetrics) -> None: ...

    def close(self) -> None: ...


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def _append_handle(path: str) -> TextIO:
    """A file opened for appending, private to the user (0o640), never through a planted symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, FILE_MODE), "a", newline="", encoding="utf-8")


def _csv_fields(fields: list) -> str:
    """``fields`` as one CSV line without its end, quoted where the format needs it (a name with a comma)."""
    text = io.StringIO()
    csv.writer(text, lineterminator="").writerow(fields)
    return text.getvalue()


class CsvWriter:
    def __init__(self, directory: Path, ndigits: int, steps_per_file: int) -> None:
        self.directory, self.ndigits, self.steps_per_file = os.fspath(directory), ndigits, steps_per_file
        self.open_files: dict[str, TextIO] = {}
        self.layout: RowLayout | None = None
        self.plan: dict[str, list[tuple[int, str, str, str]]] = {}  # the layout's, see _plan

    def path(self, group: str, step: int) -> str:
        first = step - step % self.steps_per_file
        return os.path.join(self.directory, f"{group}_{first}-{first + self.steps_per_file - 1}.csv")

    @staticmethod
    def _plan(layout: RowLayout) -> dict[str, list[tuple[int, str, str, str]]]:
        """Per group, each row's index and its text around the step and the values, the same every step:
        (index, text before the step, the micro-step column, text after the values)."""
        plan: dict[str, list[tuple[int, str, str, str]]] = defaultdict(list)
        for index, (group, name, micro, shape, dtype, vpp) in enumerate(zip(
                layout.groups, layout.names, layout.micro_steps, layout.shapes, layout.dtypes, layout.vpp_stages)):
            column = ("," if micro is None else f",{micro}") if group in MICRO_STEP_GROUPS else ""
            after = "," + _csv_fields([_shape_text(shape), dtype]) + "\n"
            plan[group].append((index, _csv_fields([vpp, name]) + ",", column, after))
        return plan

    def write(self, metrics: StepMetrics) -> None:
        if metrics.layout is not self.layout:
            self.layout, self.plan = metrics.layout, self._plan(metrics.layout)
        step, ndigits, values = metrics.step, self.ndigits, metrics.values.tolist()
        paths = {group: self.path(group, step) for group in self.plan}
        for stale in [path for path in self.open_files if path not in paths.values()]:
            self.open_files.pop(stale).close()  # its block of steps is over
        for group, rows in self.plan.items():
            text = [f"{before}{step}{micro},{','.join([str(round(v, ndigits)) for v in values[index]])}{after}"
                    for index, before, micro, after in rows]
            path = paths[group]
            handle = self.open_files.get(path)
            if handle is None:
                handle = self.open_files[path] = _append_handle(path)
                if handle.tell() == 0:
                    micro = ["micro_step"] if group in MICRO_STEP_GROUPS else []
                    header = ["vpp_stage", "name", "step", *micro, *metrics.ops, "shape", "dtype"]
                    text.insert(0, _csv_fields(header) + "\n")
            handle.write("".join(text))
            handle.flush()

    def close(self) -> None:
        for handle in self.open_files.values():
            handle.close()
        self.open_files = {}


class SqliteWriter:
    def __init__(self, directory: Path) -> None:
        self.connection = sqlite3.connect(directory / DB_FILE)
        self.connection.execute("PRAGMA journal_mode=WAL")  # a commit per step without an fsync per step
        self.connection.execute("PRAGMA synchronous=NORMAL")
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
