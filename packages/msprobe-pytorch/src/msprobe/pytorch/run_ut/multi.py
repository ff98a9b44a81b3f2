"""``msprobe -f pytorch multi_run_ut``: ``run_ut`` with the dump's APIs split over processes.

The APIs ``run_ut`` would check (after ``-csv_path``, the config's lists and ``-f``) are split into N
contiguous parts; each part runs ``run_ut`` in its own process (multiprocessing, ``spawn`` context:
torch and ``fork`` do not mix) writing into a temporary folder under the output directory; the parts'
files are then merged into one result CSV, one details CSV (rows in the dump's order, as ``run_ut``
writes them) and one summary JSON, and the temporary folders removed. Exit codes as ``run_ut``.
This module imports torch only when a run starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from msprobe.core.cli import Command
from msprobe.core.log import logger
from msprobe.pytorch.run_ut.command import _configure as _configure_run_ut

MAX_PARTS = 64
DEFAULT_PARTS = 8


def _parts_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_PARTS:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..{MAX_PARTS}")
    return value


def split_parts(items: list[str], parts: int) -> list[list[str]]:
    """``items`` in ``parts`` contiguous, non-empty chunks whose sizes differ by at most one (fewer
    chunks when there are fewer items; one empty chunk when there are none)."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks


def _run_part(api_info: str, part_dir: str, apis: list[str], device: str, save_error_data: bool,
              seed: int) -> tuple[int, str | None]:
    """One part, in its own process: (APIs judged, error message or None)."""
    from msprobe.core.run_ut.report import ReportError
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import run_ut

    try:
        result = run_ut(api_info, part_dir, device=device, save_error_data=save_error_data, seed=seed, apis=apis)
    except (RunUtError, ReportError) as exc:
        return 0, str(exc)
    return result.checked, None


def multi_run_ut(api_info: str | os.PathLike, output_dir: str | os.PathLike = ".", *, parts: int | None = None,
                 device: str = "cpu", save_error_data: bool = False, csv_path: str | os.PathLike | None = None,
                 filter_duplicates: bool = False, white_list: tuple[str, ...] = (),
                 black_list: tuple[str, ...] = (), seed: int | None = None) -> tuple[dict[str, Any], int]:
    """Run ``run_ut`` over ``parts`` processes (default ``min(8, APIs, CPUs)``) and merge the reports;
    returns (the merged summary, APIs judged). Raises ``RunUtError``/``ReportError`` for bad input."""
    from msprobe.core.compare.reader import CompareError, read_dump
    from msprobe.core.run_ut.report import merge_parts, read_done
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import DEFAULT_SEED, check_device, select_apis

    seed = DEFAULT_SEED if seed is None else seed
    check_device(device)
    try:
        dump = read_dump(api_info, "api_info")
    except CompareError as exc:
        raise RunUtError(str(exc)) from None
    done = read_done(csv_path) if csv_path is not None else set()
    selected = [n.removesuffix(".forward")
                for n in select_apis(dump.entries, done, white_list, black_list, filter_duplicates)]
    wanted = parts if parts is not None else min(DEFAULT_PARTS, os.cpu_count() or 1)
    chunks = split_parts(selected, wanted)
    out = Path(csv_path).parent if csv_path is not None else Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=".multi_run_ut_", dir=out))
    try:
        dirs = [temp / f"part_{k}" for k in range(len(chunks))]
        logger.info("multi_run_ut: %d APIs in %d parts", len(selected), len(chunks))
        import multiprocessing

        with ProcessPoolExecutor(len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_part, str(api_info), str(d), chunk, device, save_error_data, seed)
                       for d, chunk in zip(dirs, chunks)]
            try:
                outcomes = [f.result() for f in futures]
            except BrokenProcessPool as exc:
                raise RunUtError(f"a part's process died: {exc}") from None
        errors = [f"part {k}: {msg}" for k, (_, msg) in enumerate(outcomes) if msg]
        if errors:
            raise RunUtError("; ".join(errors))
        checked = sum(n for n, _ in outcomes)
        summary = merge_parts(dirs, out, csv_path, parts=len(chunks), checked=checked,
                              white_list=list(white_list), black_list=list(black_list),
                              filter_duplicates=filter_duplicates)
        if save_error_data:
            _move_error_data(dirs, out / "error_data")
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return summary, checked


def _move_error_data(dirs: list[Path], target: Path) -> None:
    for d in dirs:
        source = d / "error_data"
        if not source.is_dir():
            continue
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(source.iterdir()):
            dest = target / item.name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.move(str(item), str(dest))


def _configure(parser: argparse.ArgumentParser) -> None:
    _configure_run_ut(parser)
    parser.add_argument("-n", "--num_splits", dest="parts", type=_parts_arg, default=None,
                        help=f"number of parts, each run in its own process (1..{MAX_PARTS}; default "
                             f"{DEFAULT_PARTS}, at most the number of APIs and of CPUs)")


def _run(args: argparse.Namespace) -> int:
    from msprobe.core.config import ConfigError
    from msprobe.core.run_ut.report import ReportError
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import load_lists

    try:
        white, black = load_lists(args.config_path)
        summary, checked = multi_run_ut(args.api_info, args.out_path, parts=args.parts, device=args.device,
                                        save_error_data=args.save_error_data, csv_path=args.csv_path,
                                        filter_duplicates=args.filter_api, white_list=white, black_list=black,
                                        seed=args.seed)
    except (RunUtError, ReportError, ConfigError) as exc:
        logger.error("multi_run_ut: %s", exc)
        return 2
    logger.info("multi_run_ut: %d APIs in %d parts, forward %s, backward %s; results in %s", summary["apis"],
                summary["parts"], summary["forward"], summary["backward"], summary["result_csv"])
    if checked == 0:
        logger.error("multi_run_ut: no API was checked (every API was skipped or filtered out)")
        return 1
    return 0


def multi_run_ut_command() -> Command:
    return Command("run_ut with the dump's APIs split over N processes; one merged report", _configure, _run)
