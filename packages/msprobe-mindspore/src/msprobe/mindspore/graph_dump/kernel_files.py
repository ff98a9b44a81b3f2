"""MindSpore's kernel files: what their names say, where MindSpore puts them, and where msprobe files them.

MindSpore writes ``{root}/rank_{R}/{net_name}/{graph_id}/{iteration}/`` with one file per kernel tensor,
named ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}.{dtype}.npy``
(``op_name`` is the kernel's full scope name with ``/`` replaced by ``_``). msprobe moves each finished
iteration's files, names unchanged, to ``{dump_path}/step{iteration}/rank{R}/graph{graph_id}/``: one step
is one execution of the compiled training step, which MindSpore counts as one iteration.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

TENSOR_SUFFIXES = (".npy", ".bin")


@dataclass(frozen=True)
class KernelFile:
    """One tensor of one kernel execution, as MindSpore named its file."""

    path: Path
    op_type: str
    op_name: str
    task_id: str
    stream_id: str
    timestamp: int  # MindSpore's clock, in execution order within a process
    io: str  # "input" or "output"
    slot: int
    data_format: str
    dtype: str  # as MindSpore names it: "Float32", "Int64", "Bool", ...

    @property
    def kernel(self) -> str:
        return f"{self.op_type}.{self.op_name}"


def parse_kernel_file(path: Path) -> KernelFile | None:
    """The fields of a kernel tensor file's name; None for any other file (e.g. ``statistic.csv``)."""
    if path.suffix not in TENSOR_SUFFIXES:
        return None
    head, *fields = path.name[: -len(path.suffix)].rsplit(".", 7)  # op_name may hold dots: parse from the right
    op_type, _, op_name = head.partition(".")
    if len(fields) != 7 or not op_name or fields[3] not in ("input", "output"):
        return None
    task_id, stream_id, timestamp, io, slot, data_format, dtype = fields
    if not (timestamp.isdigit() and slot.isdigit()):
        return None
    return KernelFile(path, op_type, op_name, task_id, stream_id, int(timestamp), io, int(slot), data_format, dtype)


@dataclass(frozen=True)
class IterationDir:
    graph_id: int
    iteration: int
    path: Path


def iteration_dirs(kernel_root: Path, device_rank: int, up_to: int | None) -> list[IterationDir]:
    """MindSpore's iteration directories for this rank, numbered ``up_to`` or lower (all when None)."""
    net_dirs = (kernel_root / f"rank_{device_rank}").glob("*/*/*")
    found = []
    for path in net_dirs:
        graph, iteration = path.parent.name, path.name
        if path.is_dir() and graph.isdigit() and iteration.isdigit() and (up_to is None or int(iteration) <= up_to):
            found.append(IterationDir(int(graph), int(iteration), path))
    return sorted(found, key=lambda d: (d.iteration, d.graph_id))


def move_iteration(source: Path, target: Path) -> list[KernelFile]:
    """Move every file of one iteration directory into ``target`` (names unchanged) and remove ``source``.

    Returns the kernel tensor files in execution order.
    """
    moved = []
    for path in sorted(source.iterdir()):
        destination = target / path.name
        path.replace(destination)
        moved.append(destination)
    shutil.rmtree(source)
    kernel_files = (parse_kernel_file(path) for path in moved)
    return sorted((f for f in kernel_files if f is not None), key=lambda f: f.timestamp)
