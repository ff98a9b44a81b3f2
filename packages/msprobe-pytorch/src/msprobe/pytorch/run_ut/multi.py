"""``msprobe -f pytorch multi_run_ut``: ``run_ut`` with the dump's APIs split over processes.

The APIs ``run_ut`` would check (after ``-csv_path``, the config's lists and ``-f``) are selected here;
splitting, the processes, merging the parts' reports in order and moving their error data are the
framework-free :mod:`msprobe.core.run_ut.parallel`. Exit codes as ``run_ut``. This module imports torch
only when a run starts.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msprobe.core.engine import EngineChoice, choice_from_args
from msprobe.core.run_ut.command import run_command, with_parts
from msprobe.core.run_ut.parallel import DEFAULT_PARTS, MAX_PARTS, PartError, run_parts, split_parts
from msprobe.core.run_ut.replay_common import error_data_dir, rows_to_check
from msprobe.core.run_ut.report import ReportError, report_dir
from msprobe.core.services.plugin import Command
from msprobe.pytorch.run_ut.command import _configure as _configure_run_ut
from msprobe.pytorch.run_ut.command import set_jit_compile

__all__ = ["DEFAULT_PARTS", "MAX_PARTS", "multi_run_ut", "multi_run_ut_command", "split_parts"]


def _run_part(api_info: str, save_error_data: bool, seed: int, jit_compile: bool, part_dir: str, apis: list[str],
              device: str) -> tuple[int, str | None]:
    """One part, in its own process: (APIs judged, error message or None), on the device
    :func:`~msprobe.core.run_ut.parallel.run_parts` placed it on (on Ray, the one Ray assigned). Error data
    goes into the part's folder; ``run_parts`` moves it to its final place."""
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import run_ut

    if jit_compile:
        set_jit_compile(device)
    try:
        result = run_ut(api_info, part_dir, device=device, save_error_data=save_error_data, seed=seed, apis=apis,
                        error_data_path=Path(part_dir) / "error_data" if save_error_data else None)
    except (RunUtError, ReportError) as exc:
        return 0, str(exc)
    return result.checked, None


def multi_run_ut(api_info: str | os.PathLike, output_dir: str | os.PathLike = ".", *, parts: int | None = None,
                 device: str = "cpu", save_error_data: bool = False, csv_path: str | os.PathLike | None = None,
                 filter_duplicates: bool = False, white_list: tuple[str, ...] = (),
                 black_list: tuple[str, ...] = (), seed: int | None = None,
                 error_data_path: str | os.PathLike | None = None,
                 devices: Sequence[str] | None = None, jit_compile: bool = False,
                 engine: EngineChoice | None = None) -> tuple[dict[str, Any], int]:
    """Run ``run_ut`` over ``parts`` processes (default ``min(8, APIs, CPUs)``) and merge the reports;
    returns (the merged summary, APIs judged). ``devices``: part K runs on ``devices[K % len]`` (default:
    every part on ``device``). ``engine``: where the parts run (default local processes; docs/scale.md); on
    Ray a part on an accelerator asks Ray for one and replays on the one Ray assigned, among the ids
    ``devices`` names (checked on the node that runs the part: the machine running this need have none).
    Raises ``RunUtError``/``ReportError`` for bad input."""
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import DEFAULT_SEED, check_device

    seed = DEFAULT_SEED if seed is None else seed
    devices = list(devices or [device])
    if engine is None or engine.name != "ray":  # on Ray the node that runs a part checks its device
        for name in devices:
            check_device(name)
    selected = rows_to_check(api_info, csv_path, white_list, black_list, filter_duplicates)
    out = report_dir(output_dir, csv_path)
    runner = functools.partial(_run_part, str(api_info), save_error_data, seed, jit_compile)
    try:
        return run_parts(runner, selected, out, parts=parts, csv_path=csv_path,
                         error_data_dir=error_data_dir(out, error_data_path) if save_error_data else None,
                         white_list=list(white_list), black_list=list(black_list),
                         filter_duplicates=filter_duplicates, devices=devices, engine=engine)
    except PartError as exc:
        raise RunUtError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    return run_command("multi_run_ut", lambda: _replay(args), lambda summary: (
        f"{summary['apis']} APIs in {summary['parts']} parts, forward {summary['forward']}, backward "
        f"{summary['backward']}; results in {summary['result_csv']}"))


def _replay(args: argparse.Namespace) -> tuple[dict, int]:
    from msprobe.pytorch.run_ut.replay import load_run_ut_section

    section = load_run_ut_section(args.config_path)
    return multi_run_ut(args.api_info, args.out_path, parts=args.parts, device=args.device,
                        save_error_data=args.save_error_data, csv_path=args.csv_path,
                        filter_duplicates=args.filter_api, white_list=section.white_list,
                        black_list=section.black_list, seed=args.seed, error_data_path=section.error_data_path,
                        devices=getattr(args, "devices", None), jit_compile=args.jit_compile,
                        engine=choice_from_args(args))


def multi_run_ut_command() -> Command:
    return Command("run_ut with the dump's APIs split over N processes; one merged report",
                   with_parts(_configure_run_ut), _run)
