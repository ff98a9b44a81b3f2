"""``msprobe -f <framework> compare``: the same command for every framework, given its tensor loader."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from msprobe.core.cli import Command
from msprobe.core.compare.api import input_paths, run_compare
from msprobe.core.compare.engine import CompareOptions, TensorLoader
from msprobe.core.compare.reader import CompareError, load_json_file, read_mapping
from msprobe.core.log import logger


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_path", required=True, help="compare.json: npu_path, bench_path[, stack_path]")
    parser.add_argument("-o", "--output_path", required=True, help="directory for the reports")
    parser.add_argument("-s", "--stack_mode", action="store_true", help="add the NPU_Stack_Info column")
    parser.add_argument("-c", "--compare_only", action="store_true",
                        help="only write the tables: skip the first-divergence analysis")
    parser.add_argument("-f", "--fuzzy_match", action="store_true", help="match APIs ignoring their call counts")
    parser.add_argument("-dm", "--data_mapping", help="file of 'npu_name: bench_name' lines (1.1.1's mapping.yaml)")
    parser.add_argument("-j", "--workers", type=int, help="worker processes for tensor metrics (default: CPUs - 1)")


def compare_command(loader_factory: Callable[[], TensorLoader]) -> Command:
    """The ``compare`` command; ``loader_factory`` imports the framework lazily and returns its loader."""

    def run(args: argparse.Namespace) -> int:
        try:
            config_path = Path(args.input_path)
            paths = input_paths(load_json_file(config_path, "compare input file"), config_path.parent)
            mapping = read_mapping(args.data_mapping) if args.data_mapping else {}
            options = CompareOptions(args.stack_mode, args.fuzzy_match, mapping, args.workers, not args.compare_only)
            run_compare(loader_factory(), paths, args.output_path, options)
        except CompareError as exc:
            logger.error("compare: %s", exc)
            return 2
        return 0

    return Command("compare two dumps and report where they first diverge", _configure, run)
