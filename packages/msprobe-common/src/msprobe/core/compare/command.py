"""``msprobe -f <framework> compare``: the same command for every framework, given its tensor loader.

Exit codes: 0 every row was compared (whether or not the runs diverge: finding a divergence is a
successful comparison); 1 the reports were written but some rows could not be compared (tensor files
missing, unreadable or not matching dump.json); 2 bad input, nothing compared (a missing or invalid
compare.json, dump.json or stack.json, dumps of different tasks, a bad ``-j``, a Ray cluster that cannot be
reached with ``--engine ray``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from msprobe.core.cli import Command
from msprobe.core.compare.api import input_paths, layout_of, run_compare
from msprobe.core.compare.judge import DEFAULT_LIMIT, Replay
from msprobe.core.compare.pipeline import CompareOptions, TensorLoader, check_workers
from msprobe.core.compare.read import (
    INPUT_MAX_BYTES,
    CompareError,
    Layout,
    load_json_file,
    read_mapping,
    read_user_maps,
)
from msprobe.core.compare.report import printable
from msprobe.core.engine import EngineError, add_engine_flags, choice_from_args, open_engine
from msprobe.core.services.log import logger


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_path", required=True, help="compare.json: npu_path, bench_path[, stack_path]")
    parser.add_argument("-o", "--output_path", required=True, help="directory for the reports")
    parser.add_argument("-s", "--stack_mode", action="store_true", help="add the NPU_Stack_Info column")
    parser.add_argument("-c", "--compare_only", action="store_true",
                        help="only write the tables: skip the first-divergence analysis")
    parser.add_argument("-f", "--fuzzy_match", action="store_true", help="match APIs ignoring their call counts")
    parser.add_argument("-dm", "--data_mapping", help="file of 'npu_name: bench_name' lines (1.1.1's mapping.yaml)")
    for short, long, what in (("-am", "--api_mapping", "MindSpore API → PyTorch API, with argument positions"),
                              ("-cm", "--cell_mapping", "'cell_path.Class: module_path.Class' lines"),
                              ("-lm", "--layer_mapping", "per layer class, MindSpore → PyTorch attribute names")):
        parser.add_argument(short, long, nargs="?", const=True, metavar="YAML",
                            help=f"MindSpore against PyTorch: {what} (optional; the built-in maps apply without it)")
    add_layout_flags(parser)
    parser.add_argument("-j", "--workers", type=_workers, metavar="N",
                        help="worker processes for tensor metrics, 1 to the number of CPUs (default: CPUs, at most 8)")
    add_engine_flags(parser)


def _workers(text: str) -> int:
    """``-j``: argparse reports a bad value as a usage error (exit code 2)."""
    try:
        value = int(text)
    except ValueError:
        value = text  # type: ignore[assignment]
    try:
        return check_workers(value)  # type: ignore[return-value]
    except CompareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_layout_flags(parser: argparse.ArgumentParser) -> None:
    """``--tp N`` / ``--pp N``, shared by compare and graph (docs/pytorch/distributed_compare.md)."""
    for flag, what in (("--tp", "tensor"), ("--pp", "pipeline")):
        parser.add_argument(flag, type=_positive(flag), metavar="N",
                            help=f"the {what}-parallel size of the multi-rank side, merged before comparing "
                                 f"(default: read from the dump; docs/pytorch/distributed_compare.md)")


def _positive(flag: str) -> Callable[[str], int]:
    """``--tp``/``--pp``: a positive integer (argparse reports anything else as a usage error, exit code 2)."""

    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give a positive integer (a parallel size)")
        return int(text)

    return parse


def _attribute(text: str) -> int:
    """``--attribute N``: a positive integer (argparse reports anything else as a usage error, exit code 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--attribute {text!r}: give a positive integer (how many diverging APIs "
                                         f"to replay; default {DEFAULT_LIMIT})")
    return int(text)


def compare_command(loader_factory: Callable[[], TensorLoader],
                    replay_factory: Callable[[], Replay] | None = None) -> Command:
    """The ``compare`` command; ``loader_factory`` imports the framework lazily and returns its loader;
    ``replay_factory`` likewise its replay, which adds ``--attribute`` (:mod:`.judge.attribution`)."""

    def configure(parser: argparse.ArgumentParser) -> None:
        _configure(parser)
        if replay_factory is not None:
            parser.add_argument("--attribute", nargs="?", const=DEFAULT_LIMIT, default=0, type=_attribute,
                                metavar="N", help=f"replay the first N (default {DEFAULT_LIMIT}) diverging APIs on the "
                                                  f"bench's and the target's inputs: made by the target's kernel, "
                                                  f"the dtype, or inherited?")

    def run(args: argparse.Namespace) -> int:
        try:
            config_path = Path(args.input_path)
            given = load_json_file(config_path, "compare input file", INPUT_MAX_BYTES)
            paths = input_paths(given, config_path.parent)
            stated = layout_of(given)
            layout = Layout(args.tp or stated.tp, args.pp or stated.pp)
            mapping = read_mapping(args.data_mapping) if args.data_mapping else {}
            attribute = getattr(args, "attribute", 0)
            options = CompareOptions(args.stack_mode, args.fuzzy_match, mapping, args.workers, not args.compare_only,
                                     attribute=attribute, replay=replay_factory() if attribute else None,
                                     maps=read_user_maps(args.api_mapping, args.cell_mapping, args.layer_mapping),
                                     engine=choice_from_args(args))
            with open_engine(options.engine):  # one Ray for the whole run, reached before anything is read
                result = run_compare(loader_factory(), paths, args.output_path, options, layout)
        except (CompareError, EngineError) as exc:
            logger.error("compare: %s", printable(exc))
            return 2
        return 1 if result.not_compared else 0

    return Command("compare two dumps and report where they first diverge", configure, run)
