"""The ``run_ut`` command (flags as msprobe 1.1.1 names them). torch is imported when it runs.

Exit codes: 0 at least one API was judged (whatever the verdicts: finding an error is a successful
check); 1 nothing was judged (every API SKIP, or none left); 2 bad input (a missing or invalid
dump.json, config or result CSV, a missing tensor file, an unavailable device).
"""

from __future__ import annotations

import argparse

from msprobe.core.cli import Command
from msprobe.core.log import logger


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-api_info", "--api_info_file", dest="api_info", required=True,
                        help="dump.json of a task 'tensor' or 'statistics' L1 dump")
    parser.add_argument("-o", "--out_path", dest="out_path", default=".", help="directory for the reports")
    parser.add_argument("-save_error_data", "--save_error_data", dest="save_error_data", action="store_true",
                        help="save the inputs and both outputs of failing APIs under <out>/error_data/")
    parser.add_argument("-d", "--device", dest="device", default="cpu",
                        help="device the APIs run on at their recorded dtype: cpu (default), cuda:N, npu:N")
    parser.add_argument("-csv_path", "--result_csv_path", dest="csv_path",
                        help="an accuracy_checking_result_*.csv to resume: its APIs are skipped, rows appended")
    parser.add_argument("-f", "-filter_api", "--filter_api", dest="filter_api", action="store_true",
                        help="check one API of each group with the same name, dtypes, shapes and other arguments")
    parser.add_argument("-config", "--config_path", dest="config_path",
                        help="config.json whose run_ut section gives white_list/black_list")
    parser.add_argument("-seed", "--seed", dest="seed", type=int, default=None,
                        help="seed of the inputs generated for a statistics dump (default 1234)")


def _run(args: argparse.Namespace) -> int:
    from msprobe.core.config import ConfigError
    from msprobe.core.run_ut.report import ReportError
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import DEFAULT_SEED, load_lists, run_ut

    try:
        white, black = load_lists(args.config_path)
        result = run_ut(args.api_info, args.out_path, device=args.device, save_error_data=args.save_error_data,
                        csv_path=args.csv_path, filter_duplicates=args.filter_api, white_list=white,
                        black_list=black, seed=DEFAULT_SEED if args.seed is None else args.seed)
    except (RunUtError, ReportError, ConfigError) as exc:
        logger.error("run_ut: %s", exc)
        return 2
    summary = result.summary
    logger.info("run_ut: %d APIs, forward %s, backward %s; results in %s", summary["apis"], summary["forward"],
                summary["backward"], summary["result_csv"])
    if result.checked == 0:
        logger.error("run_ut: no API was checked (every API was skipped or filtered out)")
        return 1
    return 0


def run_ut_command() -> Command:
    return Command("replay the APIs of a dump on a high-precision bench and judge them", _configure, _run)
