"""The ``run_ut`` command (flags as msprobe 1.1.1 names them). torch is imported when it runs.

Exit codes: 0 at least one API was judged (whatever the verdicts: finding an error is a successful
check); 1 nothing was judged (every API SKIP, or none left); 2 bad input (a missing or invalid
dump.json, config or result CSV, an unavailable device: nothing is checked), or a tensor file missing
or unreadable (its API is reported SKIP naming it, the others are judged, the reports are written).
"""

from __future__ import annotations

import argparse

from msprobe.core.cli import Command
from msprobe.core.engine import add_engine_flags, choice_from_args
from msprobe.core.services.log import logger
from msprobe.core.run_ut.command import run_command


def device_name(text: str) -> str:
    """``-d`` as 1.1.1 spells it (a device id, ``0``) or as torch names it (``cpu``, ``npu:0``)."""
    if not text.isdigit():
        return text
    import importlib.util

    return f"{'npu' if importlib.util.find_spec('torch_npu') else 'cuda'}:{int(text)}"


class _DeviceAction(argparse.Action):
    """``-d A [B ...]``: ``device`` is the first (a name), ``devices`` all of them; repeats are an error."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        names = [device_name(v) for v in values]
        if len(set(names)) != len(names):
            parser.error(f"argument -d: devices must be unique, got {' '.join(values)}")
        namespace.device, namespace.devices = names[0], names


def _configure(parser: argparse.ArgumentParser, *, online: bool = False) -> None:
    """``online``: run_ut's own parser, where a -config with ``run_ut.is_online`` replaces -api_info."""
    parser.add_argument("-api_info", "--api_info_file", dest="api_info", required=not online,
                        help="dump.json of a task 'tensor' or 'statistics' L1 dump" + (
                            " (required unless the -config has run_ut.is_online: true, docs/run_ut_online.md)"
                            if online else ""))
    parser.add_argument("-o", "--out_path", dest="out_path", default=".", help="directory for the reports")
    parser.add_argument("-save_error_data", "--save_error_data", dest="save_error_data", action="store_true",
                        help="save the inputs and both outputs of failing APIs under the config's "
                             "run_ut.error_data_path (default <out>/error_data/)")
    parser.add_argument("-d", "--device", dest="device", nargs="+", default="cpu", action=_DeviceAction,
                        metavar="DEVICE",
                        help="device the APIs run on at their recorded dtype: cpu (default), cuda:N, npu:N, or "
                             "1.1.1's device ids (N: npu:N where torch_npu is installed, else cuda:N); "
                             "several: multi_run_ut spreads its parts over them, run_ut uses the first")
    parser.add_argument("-j", "--jit_compile", dest="jit_compile", action="store_true",
                        help="NPU devices: turn on torch_npu's jit compile mode (as 1.1.1); ignored elsewhere")
    parser.add_argument("-csv_path", "--result_csv_path", dest="csv_path",
                        help="an accuracy_checking_result_*.csv to resume: its APIs are skipped, rows appended")
    parser.add_argument("-f", "-filter_api", "--filter_api", dest="filter_api", action="store_true",
                        help="check one API of each group with the same name, dtypes, shapes and other arguments")
    parser.add_argument("-config", "--config_path", dest="config_path",
                        help="config.json whose run_ut section gives white_list/black_list")
    parser.add_argument("-seed", "--seed", dest="seed", type=int, default=None,
                        help="seed of the inputs generated for a statistics dump (default 1234)")


def set_jit_compile(device: str) -> None:
    """``-j``: torch_npu's compile mode, which only an NPU device has."""
    if not device.startswith("npu"):
        logger.info("run_ut: -j applies to npu devices only; ignored for %s", device)
        return
    import torch
    import torch_npu  # noqa: F401  (registers torch.npu)

    torch.npu.set_compile_mode(jit_compile=True)


def _run(args: argparse.Namespace) -> int:
    return run_command("run_ut", lambda: _replay(args), lambda summary: (
        f"{summary['apis']} APIs, forward {summary['forward']}, backward {summary['backward']}; "
        f"results in {summary['result_csv']}"))


def _replay(args: argparse.Namespace) -> tuple[dict, int] | int:
    from msprobe.pytorch.run_ut.inputs import RunUtError
    from msprobe.pytorch.run_ut.replay import DEFAULT_SEED, load_run_ut_section, run_ut

    section = load_run_ut_section(args.config_path)
    engine = choice_from_args(args)
    if args.config_path is not None:  # run_ut.is_online: receive APIs from a training job instead
        from msprobe.pytorch.online.receive import receive_if_online

        online = receive_if_online(args.config_path, args.out_path, getattr(args, "devices", args.device), engine)
        if online is not None:
            return online
    if engine.name != "local":
        raise RunUtError(f"--engine {engine.name}: run_ut replays a dump in one process; use multi_run_ut --engine "
                         f"{engine.name} (or an online run, run_ut.is_online)")
    if args.jit_compile:
        set_jit_compile(args.device)
    if args.api_info is None:
        raise RunUtError("-api_info is required (or a -config whose run_ut section has is_online: true)")
    result = run_ut(args.api_info, args.out_path, device=args.device, save_error_data=args.save_error_data,
                    csv_path=args.csv_path, filter_duplicates=args.filter_api, white_list=section.white_list,
                    black_list=section.black_list, seed=DEFAULT_SEED if args.seed is None else args.seed,
                    error_data_path=section.error_data_path)
    return result.summary, result.checked


def _configure_run_ut(parser: argparse.ArgumentParser) -> None:
    """run_ut's own flags: an online run's replays may run on Ray (``--engine``; docs/scale.md)."""
    _configure(parser, online=True)
    add_engine_flags(parser)


def run_ut_command() -> Command:
    return Command("replay the APIs of a dump on a high-precision bench and judge them", _configure_run_ut, _run)
