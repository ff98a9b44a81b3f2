"""What ``graph -i input.json`` names, and the directory rules of msprobe 1.1.1.

input.json is ``{"npu_path": DIR}`` (build) or ``{"npu_path": DIR, "bench_path": DIR}`` (compare),
optionally with ``is_print_compare_log`` (accepted, unused) and the stated layout ``tp``, ``pp``. Each
directory is one of:

- a rank directory: it holds files (dump.json, stack.json, construct.json) or ``dump_tensor_data``;
- a directory of process directories, all named ``rank{N}`` (our single-device ``rank`` and msprobe 26.2.0's
  ``proc{pid}`` too: compare's read room names them, :func:`msprobe.core.compare.read.process_dirs`);
- a directory of step directories, all named ``step{N}``, each holding rank directories.

Compare pairs steps by name and ranks by number (a bare ``rank`` or a ``proc{pid}`` is rank 0, so either
generation's dump pairs with the other's); both sides must have the same steps and ranks. A step of several ranks
against a step of one rank (or any step with a stated layout) is one merged job instead: its ranks are
merged into one rank-like dump as compare merges them (docs/pytorch/distributed_compare.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from msprobe.core.compare.distributed import needs_merge
from msprobe.core.compare.read import (
    INPUT_MAX_BYTES,
    NO_LAYOUT,
    CompareError,
    Layout,
    load_json_file,
    process_dirs,
    process_rank,
)
from msprobe.core.dump.json_files import TENSOR_DIR

ALLOWED_KEYS = ("npu_path", "bench_path", "is_print_compare_log", "tp", "pp")
RANKS, STEPS, FILES = "ranks", "steps", "files"
_STEP = re.compile(r"^step\d+$")


class GraphInputError(CompareError):
    """input.json or a directory it names is not what the graph command can read."""


@dataclass(frozen=True)
class Job:
    """One graph to write: the rank directories of each side and the output file's stem; ``merged``: a side
    is a directory of rank directories, merged into one dump (the other side is one rank directory)."""

    npu: Path
    bench: Path | None
    stem: str
    merged: bool = False


def read_input(path: str | Path) -> tuple[Path, Path | None, Layout]:
    obj = load_json_file(Path(path), "graph input file", INPUT_MAX_BYTES)
    if not isinstance(obj, dict):
        raise GraphInputError(f"graph input file {str(path)!r} must be a JSON object with 'npu_path' "
                              f"(and 'bench_path' to compare)")
    unknown = sorted(set(obj) - set(ALLOWED_KEYS))
    if unknown:
        raise GraphInputError(f"graph input file {str(path)!r}: unknown key {unknown[0]!r}; allowed: "
                              f"{', '.join(ALLOWED_KEYS)}")
    npu = _directory(obj, "npu_path", path, required=True)
    bench = _directory(obj, "bench_path", path, required=False)
    return npu, bench, Layout.checked(obj.get("tp"), obj.get("pp"), f"graph input file {str(path)!r}")  # type: ignore[return-value]


def _directory(obj: dict, key: str, source: str | Path, required: bool) -> Path | None:
    raw = obj.get(key)
    if raw is None and not required:
        return None
    if not isinstance(raw, str) or not raw:
        raise GraphInputError(f"graph input file {str(source)!r}: {key!r} is {raw!r}; expected the path of a dump "
                              f"directory (a rank directory, or a directory of rank{{N}} or step{{N}} directories)")
    path = Path(raw)
    if not path.is_absolute() and not path.exists() and (Path(source).parent / path).exists():
        path = Path(source).parent / path
    if not path.is_dir():
        raise GraphInputError(f"{key} {raw!r} is not a directory; give the directory that holds dump.json "
                              f"(or its rank{{N}} / step{{N}} directories)")
    return path


def layout(path: Path) -> str:
    """files (one rank), ranks or steps: 1.1.1's rule, with our single-device ``rank`` directory allowed."""
    contents = sorted(path.iterdir())
    if not contents:
        raise GraphInputError(f"{str(path)!r} is empty: no dump.json and no rank or step directories")
    if (path / TENSOR_DIR).is_dir() or (path / "dump.json").is_file():
        return FILES
    directories = [item.name for item in contents if item.is_dir()]
    if not directories:
        return FILES
    if all(process_rank(name) is not None for name in directories):
        return RANKS
    if all(_STEP.match(name) for name in directories):
        return STEPS
    raise GraphInputError(f"{str(path)!r} holds {', '.join(directories)}: expected only rank{{N}} (or proc{{pid}}) "
                          f"directories, "
                          f"only step{{N}} directories, or a rank directory's files (dump.json, stack.json, "
                          f"construct.json)")


def _subdirs(path: Path, pattern: re.Pattern) -> list[str]:
    return sorted((item.name for item in path.iterdir() if item.is_dir() and pattern.match(item.name)),
                  key=lambda name: (len(name), name))


def jobs(npu: Path, bench: Path | None, timestamp: str, stated: Layout = NO_LAYOUT) -> list[Job]:
    """The graphs to write, named as 1.1.1 names them (``build_{step}_{rank}_{time}``); a merged job
    is named ``{kind}_{step}_merged_{time}``."""
    kind = "compare" if bench is not None else "build"
    shape = layout(npu)
    if bench is not None and STEPS in (shape, layout(bench)) and layout(bench) != shape:
        raise GraphInputError(f"npu_path {str(npu)!r} is laid out as {shape} but bench_path {str(bench)!r} as "
                              f"{layout(bench)}: give the same kind of directory on both sides")
    if shape != STEPS:
        return _step_jobs(npu, bench, stated, lambda rank: f"{kind}_{rank}{timestamp}")
    found: list[Job] = []
    for step_name, npu_step, bench_step in _named_pairs(npu, bench, _STEP):
        found += _step_jobs(npu_step, bench_step, stated, lambda rank, s=step_name: f"{kind}_{s}_{rank}{timestamp}")
    return found


def _step_jobs(npu: Path, bench: Path | None, stated: Layout, stem) -> list[Job]:
    """The jobs of one step on each side (a rank directory or a directory of rank directories): one merged
    job where compare would merge (``compare.distributed.needs_merge``; a build merges when a layout is
    stated), else one job per rank pair. ``stem(rank)`` names a job; ``rank`` ends with ``_`` or is empty."""
    if _merges(npu, bench, stated):
        return [Job(npu, bench, stem("merged_"), merged=True)]
    if stated.stated:
        raise GraphInputError("tp / pp describe a multi-rank run compared with a one-rank run: give a directory of "
                              "several rank directories on one side and one rank on the other")
    shape = layout(npu)
    if bench is not None and layout(bench) != shape:
        raise GraphInputError(f"npu_path {str(npu)!r} is laid out as {shape} but bench_path {str(bench)!r} as "
                              f"{layout(bench)}: give the same kind of directory on both sides")
    if shape == FILES:
        return [Job(npu, bench, stem(""))]
    return _rank_pairs(npu, bench, stem)


def _merges(npu: Path, bench: Path | None, stated: Layout) -> bool:
    if bench is None:
        return stated.stated
    return needs_merge(compare_path(npu), compare_path(bench), stated)


def compare_path(path: Path) -> Path:
    """A graph side as compare names it: a directory of rank directories, or a rank directory's dump.json."""
    return path if layout(path) == RANKS else path / "dump.json"


def _named_pairs(npu: Path, bench: Path | None, pattern: re.Pattern) -> list[tuple[str, Path, Path | None]]:
    names = _subdirs(npu, pattern)
    if bench is not None:
        other = _subdirs(bench, pattern)
        if names != other:
            raise GraphInputError(f"npu_path {str(npu)!r} has {', '.join(names) or 'nothing'} but bench_path "
                                  f"{str(bench)!r} has {', '.join(other) or 'nothing'}: the two runs must have the "
                                  f"same step directories")
    return [(name, npu / name, bench / name if bench is not None else None) for name in names]


def _rank_pairs(npu: Path, bench: Path | None, stem) -> list[Job]:
    """One job per rank, the sides paired by rank number and named after the NPU side's directory."""
    npu_ranks = process_dirs(npu, "npu_path")
    bench_ranks = process_dirs(bench, "bench_path") if bench is not None else npu_ranks
    if set(npu_ranks) != set(bench_ranks):
        raise GraphInputError(f"npu_path {str(npu)!r} has {', '.join(d.name for d in npu_ranks.values())} but "
                              f"bench_path {str(bench)!r} has {', '.join(d.name for d in bench_ranks.values())}: the "
                              f"two runs must have the same ranks")
    return [Job(path, bench_ranks[rank] if bench is not None else None, stem(f"{path.name}_"))
            for rank, path in npu_ranks.items()]

