"""``msprobe -f mindspore run_ut`` and ``multi_run_ut`` (flags as msprobe 1.1.1 names them, plus
``-bench`` and ``-seed``). mindspore (and torch) are imported when a command runs.

Exit codes: 0 at least one API was judged (whatever the verdicts: finding an error is a successful
check); 1 nothing was judged (every API SKIP, or none left); 2 bad input (a missing or invalid
dump.json or result CSV, a missing tensor file, ``-bench torch`` without torch, a failing part).
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any

from msprobe.core.engine import EngineChoice, choice_from_args
from msprobe.core.run_ut.command import REPLAY_ERRORS, run_command, with_parts
from msprobe.core.run_ut.parallel import run_parts
from msprobe.core.run_ut.replay_common import error_data_dir, rows_to_check
from msprobe.core.run_ut.report import report_dir
from msprobe.core.services.plugin import Command
from msprobe.mindspore.run_ut.details import MINDSPORE_DETAILS

BENCH_CHOICES = ("auto", "torch", "mindspore")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-api_info", "--api_info_file", dest="api_info", required=True,
                        help="dump.json of a MindSpore task 'tensor' or 'statistics' L1 dump")
    parser.add_argument("-o", "--out_path", dest="out_path", default=".", help="directory for the reports")
    parser.add_argument("-save_error_data", "--save_error_data", dest="save_error_data", action="store_true",
                        help="save the inputs, both outputs and input gradients of failing APIs (.npy) under "
                             "<out>/error_data/")
    parser.add_argument("-csv_path", "--result_csv_path", dest="csv_path",
                        help="an accuracy_checking_result_*.csv to resume: its APIs are skipped, rows appended")
    parser.add_argument("-f", "-filter_api", "--filter_api", dest="filter_api", action="store_true",
                        help="check one API of each group with the same name, dtypes, shapes and other arguments")
    parser.add_argument("-bench", "--bench", dest="bench", choices=BENCH_CHOICES, default="auto",
                        help="the high-precision side: torch (PyTorch on CPU), mindspore (MindSpore upcast) or "
                             "auto (default: torch when importable)")
    parser.add_argument("-seed", "--seed", dest="seed", type=int, default=None,
                        help="seed of the inputs generated for a statistics dump (default 1234)")
    parser.add_argument("-config", "--config_path", dest="config_path",
                        help="config.json whose run_ut section gives white_list, black_list and error_data_path")


def _line(summary: dict[str, Any]) -> str:
    return (f"{summary['apis']} APIs, forward {summary['forward']}, backward {summary['backward']}; "
            f"bench {summary.get('bench')}; results in {summary['result_csv']}")


def _run(args: argparse.Namespace) -> int:
    return run_command("run_ut", lambda: _replay(args), _line)


def _replay(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    from msprobe.mindspore.run_ut.replay import DEFAULT_SEED, load_run_ut_section, run_ut

    section = load_run_ut_section(args.config_path)
    result = run_ut(args.api_info, args.out_path, bench=args.bench, save_error_data=args.save_error_data,
                    csv_path=args.csv_path, filter_duplicates=args.filter_api,
                    seed=DEFAULT_SEED if args.seed is None else args.seed, white_list=section.white_list,
                    black_list=section.black_list, error_data_path=section.error_data_path)
    return result.summary, result.checked


def run_ut_command() -> Command:
    return Command("replay the Mint/MintFunctional/Tensor APIs of a MindSpore dump on a high-precision bench",
                   _configure, _run)


# --- multi_run_ut -----------------------------------------------------------------------------------


def _run_part(api_info: str, bench: str, save_error_data: bool, seed: int, part_dir: str,
              apis: list[str]) -> tuple[int, str | None]:
    """One part, in its own process: (APIs judged, error message or None). The lists were applied
    when the parts were made (``apis``)."""
    from msprobe.mindspore.run_ut.replay import run_ut

    try:
        result = run_ut(api_info, part_dir, bench=bench, save_error_data=save_error_data, seed=seed, apis=apis)
    except REPLAY_ERRORS as exc:
        return 0, str(exc)
    return result.checked, None


def multi_run_ut(api_info: str | os.PathLike, output_dir: str | os.PathLike = ".", *, parts: int | None = None,
                 bench: str = "auto", save_error_data: bool = False, csv_path: str | os.PathLike | None = None,
                 filter_duplicates: bool = False, seed: int | None = None, white_list: tuple[str, ...] = (),
                 black_list: tuple[str, ...] = (),
                 error_data_path: str | os.PathLike | None = None,
                 engine: EngineChoice | None = None) -> tuple[dict[str, Any], int]:
    """``run_ut`` over ``parts`` processes (:func:`msprobe.core.run_ut.parallel.run_parts`; ``engine``: local
    or Ray, docs/scale.md), one merged report; returns (the merged summary, APIs judged). Raises
    ``RunUtError``/``ReportError``/``PartError``."""
    from msprobe.mindspore.run_ut.replay import DEFAULT_SEED, choose_bench

    seed = DEFAULT_SEED if seed is None else seed
    chosen = choose_bench(bench)  # decided once: every part uses the same bench
    selected = rows_to_check(api_info, csv_path, white_list, black_list, filter_duplicates,
                             MINDSPORE_DETAILS.result_columns)
    runner = functools.partial(_run_part, str(api_info), chosen, save_error_data, seed)
    out = report_dir(output_dir, csv_path)
    return run_parts(runner, selected, output_dir, parts=parts, csv_path=csv_path,
                     error_data_dir=error_data_dir(out, error_data_path) if save_error_data else None,
                     details=MINDSPORE_DETAILS, engine=engine, filter_duplicates=filter_duplicates)


def _run_multi(args: argparse.Namespace) -> int:
    return run_command("multi_run_ut", lambda: _replay_multi(args), _line)


def _replay_multi(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    from msprobe.mindspore.run_ut.replay import load_run_ut_section

    section = load_run_ut_section(args.config_path)
    return multi_run_ut(args.api_info, args.out_path, parts=args.parts, bench=args.bench,
                        save_error_data=args.save_error_data, csv_path=args.csv_path,
                        filter_duplicates=args.filter_api, seed=args.seed, white_list=section.white_list,
                        black_list=section.black_list, error_data_path=section.error_data_path,
                        engine=choice_from_args(args))


def multi_run_ut_command() -> Command:
    return Command("run_ut with the dump's APIs split over N processes; one merged report", with_parts(_configure),
                   _run_multi)
