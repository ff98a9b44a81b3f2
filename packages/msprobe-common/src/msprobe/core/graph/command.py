"""``msprobe -f <framework> graph -i input.json -o OUT [-lm yaml] [-oc] [--tp N] [--pp N]``: the same command
for every framework, given its tensor loader (needed to compare task ``tensor`` dumps).

Exit codes: 0 the graphs were written; 2 bad input, nothing written (or, with ``--engine ray``, a cluster
that cannot be reached).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from msprobe.core.cli import Command
from msprobe.core.compare.command import add_layout_flags
from msprobe.core.compare.pipeline import CompareOptions, TensorLoader
from msprobe.core.compare.read import CompareError, Layout, read_mapping, read_user_maps
from msprobe.core.compare.report import printable
from msprobe.core.engine import EngineError, add_engine_flags, choice_from_args, open_engine
from msprobe.core.services.log import logger

FILE_TYPES = ("vis", "db")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_path", required=True,
                        help="input.json: {\"npu_path\": DIR} to build, plus \"bench_path\": DIR to compare")
    parser.add_argument("-o", "--output_path", required=True, help="directory for the .vis and .html files")
    parser.add_argument("-dm", "--data_mapping",
                        help="compare: file of 'npu_name: bench_name' lines pairing entries whose names differ")
    parser.add_argument("-lm", "--layer_mapping",
                        help="compare MindSpore with PyTorch: 1.1.1's layer mapping yaml (attribute names per layer "
                             "class, TopLayer for the model)")
    parser.add_argument("-oc", "--overflow_check", action="store_true",
                        help="mark nodes whose arguments hold inf/NaN (critical, high, medium)")
    parser.add_argument("--file_type", choices=FILE_TYPES, default="vis",
                        help="db: also write every graph into one SQLite .vis.db, which the TensorBoard graph "
                             "plugin (tb-graph-ascend) lists")
    add_layout_flags(parser)
    add_engine_flags(parser)  # where a tensor compare's pairs are compared (docs/scale.md)


def graph_command(loader_factory: Callable[[], TensorLoader]) -> Command:
    """The ``graph`` command; ``loader_factory`` imports the framework lazily and returns its loader."""

    def run(args: argparse.Namespace) -> int:
        from msprobe.core.graph.run import run_graph

        try:
            mapping = read_mapping(args.data_mapping) if args.data_mapping else {}
            maps = read_user_maps(None, None, args.layer_mapping) if args.layer_mapping else None
            options = CompareOptions(mapping=mapping, progress=False, maps=maps, engine=choice_from_args(args))
            with open_engine(options.engine):
                run_graph(args.input_path, args.output_path, loader_factory(), options, args.overflow_check,
                          Layout(args.tp, args.pp), args.file_type)
        except (CompareError, EngineError) as exc:
            logger.error("graph: %s", printable(exc))
            return 2
        return 0

    return Command("draw the model's module tree from a dump (.vis and HTML), or compare two", _configure, run)
