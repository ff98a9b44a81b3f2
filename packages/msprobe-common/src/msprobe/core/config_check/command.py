"""``msprobe [-f pytorch|mindspore] config_check``: ``-d [SCRIPT ...]`` packs, ``-c A B`` compares two packs
(``.zip``) or two checkpoints (docs/config_check.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from msprobe.core.config_check.checkpoint import HEADER, CheckpointError, Loader, compare_checkpoints, load_checkpoint
from msprobe.core.config_check.collect import FrameworkProbe, check_arguments, static_sections
from msprobe.core.config_check.diff import Difference, diff_packs
from msprobe.core.config_check.pack import SECTIONS, PackError, read_pack, write_pack
from msprobe.core.config_check.report import ReportRow, console_summary, write_reports
from msprobe.core.services.plugin import Command

PACK_HEADER = ("item", "A", "B", "difference")
NOTE = "Red rows change numbers; yellow rows may not. A is the first pack, B the second."


def _configure(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("-d", "--dump", nargs="*", metavar="SCRIPT",
                      help="pack this environment, with the hyperparameters of the launch script(s) given")
    mode.add_argument("-c", "--compare", nargs=2, metavar=("A", "B"),
                      help="compare two packs (.zip) or two checkpoints")
    parser.add_argument("-o", "--output", help="the pack (-d, default ./config_check_pack.zip) or the report "
                                               "directory (-c, default ./config_check_result)")
    parser.add_argument("--env-pattern", help="-d: also pack the variables whose names match this regular expression")


def _rows(differences: list[Difference]) -> list[ReportRow]:
    return [ReportRow(d.section, (d.item, d.a, d.b, d.kind), d.changes_numbers) for d in differences]


def compare_pack_files(a: str, b: str, output: str) -> tuple[list[Difference], dict[str, Path]]:
    differences = diff_packs(read_pack(a), read_pack(b))
    rows = _rows(differences)
    title = f"config_check: {a} (A) vs {b} (B)"
    paths = write_reports(output, "config_check_result", title, PACK_HEADER, rows, NOTE)
    print("\n".join(console_summary(title, SECTIONS, rows)))
    return differences, paths


def compare_checkpoint_files(a: str, b: str, output: str, loader: Loader | None) -> list[ReportRow]:
    rows = compare_checkpoints(load_checkpoint(a, loader), load_checkpoint(b, loader))
    title = f"checkpoint compare: {a} (A) vs {b} (B)"
    write_reports(output, "checkpoint_compare_result", title, HEADER, rows,
                  "Red rows differ (missing keys, dtype, shape or values); relative difference is ||B-A|| / ||A||.")
    differing = [row for row in rows if row.changes_numbers]
    print("\n".join(console_summary(title, ["checkpoint"], differing)))
    return rows


def config_check_command(probe: Callable[[], FrameworkProbe] | None, loader: Callable[[], Loader] | None) -> Command:
    """The command of a framework package: ``probe`` makes its framework facts (imported when run),
    ``loader`` gives its checkpoint reader."""

    def run(args: argparse.Namespace) -> int:
        try:
            if args.dump is not None:
                problems = check_arguments(args.output or "./config_check_pack.zip", args.dump, 0)
                if problems:
                    raise ValueError("; ".join(problems))
                sections = static_sections(probe() if probe else None, args.dump, [], args.env_pattern)
                path = write_pack(args.output or "./config_check_pack.zip", probe().name if probe else "", sections)
                print(f"config_check: pack written to {path}")
            elif all(p.endswith(".zip") for p in args.compare):
                compare_pack_files(*args.compare, args.output or "./config_check_result")
            else:
                compare_checkpoint_files(*args.compare, args.output or "./config_check_result",
                                         loader() if loader else None)
        except (PackError, CheckpointError, ValueError, OSError) as error:
            print(f"msprobe config_check: {error}", file=sys.stderr)
            return 2
        return 0

    return Command("pack a run's environment, packages, hyperparameters, data, weights and random calls, "
                   "or compare two packs or two checkpoints", _configure, run)
