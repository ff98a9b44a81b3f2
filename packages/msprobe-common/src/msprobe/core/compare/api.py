"""The Python API behind ``msprobe.pytorch.compare`` / ``msprobe.mindspore.compare`` (framework-free).

Accepts 1.1.1's ``input_param`` keys (``npu_json_path``, ``bench_json_path``, ``stack_json_path``)
as well as compare.json's (``npu_path``, ``bench_path``, ``stack_path``); directories mean a
multi-rank comparison of two step directories.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from msprobe.core.compare.distributed import DistributedResult, compare_merged, compare_steps, needs_merge
from msprobe.core.compare.judge import CompareResult, Replay
from msprobe.core.compare.pipeline import CompareOptions, TensorLoader, check_attribute, check_workers, compare_dumps
from msprobe.core.compare.read import NO_LAYOUT, CompareError, Layout, read_mapping, read_user_maps

_KEYS = {"npu_path": ("npu_json_path", "npu_path"), "bench_path": ("bench_json_path", "bench_path"),
         "stack_path": ("stack_json_path", "stack_path")}
ALLOWED_KEYS = {k for names in _KEYS.values() for k in names} | {"is_print_compare_log", "tp", "pp"}


def input_paths(input_param: dict[str, Any], base: Path | None = None) -> dict[str, Path | None]:
    """npu_path, bench_path, stack_path from ``input_param``; relative paths are taken from the current
    directory, or from ``base`` (the compare.json's directory) when they do not exist there."""
    if not isinstance(input_param, dict):
        raise CompareError(f"compare input must be a JSON object / dict, got {type(input_param).__name__}")
    unknown = sorted(set(input_param) - ALLOWED_KEYS)
    if unknown:
        raise CompareError(f"compare input: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(ALLOWED_KEYS))}")
    paths: dict[str, Path | None] = {}
    for field, names in _KEYS.items():
        raw = next((input_param[n] for n in names if input_param.get(n)), None)
        if raw is None:
            if field != "stack_path":
                raise CompareError(f"compare input: {field!r} is missing; give the dump.json or step directory")
            paths[field] = None
            continue
        if not isinstance(raw, (str, os.PathLike)):
            raise CompareError(f"compare input: {field!r} is {raw!r}, expected a path string")
        path = Path(raw)
        if not path.is_absolute() and not path.exists() and base is not None and (base / path).exists():
            path = base / path
        paths[field] = path
    return paths


def layout_of(input_param: dict[str, Any]) -> Layout:
    """The stated layout of the multi-rank side: compare.json's ``tp`` and ``pp``
    (docs/pytorch/distributed_compare.md)."""
    return Layout.checked(input_param.get("tp"), input_param.get("pp"))


def run_compare(loader: TensorLoader, paths: dict[str, Path | None], output: str | os.PathLike,
                options: CompareOptions, layout: Layout = NO_LAYOUT) -> CompareResult | DistributedResult:
    npu, bench = paths["npu_path"], paths["bench_path"]
    assert npu is not None and bench is not None
    if (npu.is_dir() or bench.is_dir()) and needs_merge(npu, bench, layout):
        if options.attribute:
            raise CompareError("--attribute / attribute replays the APIs of one rank: it does not apply to a "
                               "merged multi-rank comparison")
        return compare_merged(npu, bench, output, loader, options, layout)
    if layout.stated:
        raise CompareError("tp / pp describe a multi-rank run compared with a one-rank run: give a step directory "
                           "of several ranks on one side and one rank on the other")
    if npu.is_dir() != bench.is_dir():
        raise CompareError(f"npu_path {str(npu)!r} and bench_path {str(bench)!r} must both be dump.json files "
                           f"or both be step directories")
    if npu.is_dir():
        if options.mapping:
            raise CompareError("-dm / data_mapping applies to a single rank: give dump.json files, not directories")
        if options.attribute:
            raise CompareError("--attribute / attribute replays the APIs of one rank: give dump.json files, "
                               "not directories")
        return compare_steps(npu, bench, output, loader, options)
    return compare_dumps(npu, bench, output, loader, paths["stack_path"], options)


def compare_api(loader: TensorLoader, input_param: dict[str, Any], output_path: str | os.PathLike,
                stack_mode: bool = False, auto_analyze: bool = True, fuzzy_match: bool = False,
                data_mapping: str | os.PathLike | dict[str, str] | None = None,
                workers: int | None = None, attribute: int = 0,
                replay: Replay | None = None, api_mapping: str | os.PathLike | bool | None = None,
                cell_mapping: str | os.PathLike | bool | None = None,
                layer_mapping: str | os.PathLike | bool | None = None) -> CompareResult | DistributedResult:
    """``attribute``: replay the first N diverging APIs with ``replay`` (:mod:`.judge.attribution`); 0: none.
    ``api_mapping``/``cell_mapping``/``layer_mapping``: 1.1.1's ``-am``/``-cm``/``-lm``, a yaml path or True
    (a MindSpore/PyTorch pair is recognised without them: docs/cross_framework_compare.md)."""
    mapping = read_mapping(data_mapping) if isinstance(data_mapping, (str, os.PathLike)) else dict(data_mapping or {})
    options = CompareOptions(stack_mode, fuzzy_match, mapping, check_workers(workers), auto_analyze,
                             attribute=attribute, replay=replay,
                             maps=read_user_maps(api_mapping, cell_mapping, layer_mapping))
    check_attribute(options)
    return run_compare(loader, input_paths(input_param), output_path, options, layout_of(input_param))


def compare_distributed_api(loader: TensorLoader, npu_dump_dir: str | os.PathLike,
                            bench_dump_dir: str | os.PathLike, output_path: str | os.PathLike,
                            stack_mode: bool = False, auto_analyze: bool = True, fuzzy_match: bool = False,
                            workers: int | None = None) -> DistributedResult:
    options = CompareOptions(stack_mode, fuzzy_match, {}, check_workers(workers), auto_analyze)
    return compare_steps(npu_dump_dir, bench_dump_dir, output_path, loader, options)
