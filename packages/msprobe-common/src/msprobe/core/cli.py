"""The ``msprobe`` command: ``msprobe [-f pytorch|mindspore] <command> ...``.

The command lives in msprobe-common so that it exists whatever else is installed. Framework packages
add their commands through the entry-point group ``msprobe.frameworks``: each entry point (named after
the framework) loads a mapping of command name → :class:`~msprobe.core.services.plugin.Command`. A
framework's ``cli`` module must import its framework lazily (inside ``run``), so that ``msprobe --help``
stays fast and works even when a framework is broken. Framework-free commands are listed in ``CORE_COMMANDS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata

from msprobe.core.services.log import use_console
from msprobe.core.services.plugin import Command, framework_named, installed_frameworks
from msprobe.core.tasks.builtin import load_builtin_tasks

FRAMEWORKS = {"pytorch": "msprobe-pytorch", "mindspore": "msprobe-mindspore"}
DISTRIBUTIONS = ("msprobe-common", *FRAMEWORKS.values())


def _grad_compare_configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i1", "--input1", required=True, help="grad_probe dump_path (or rank directory) of run 1")
    parser.add_argument("-i2", "--input2", required=True, help="grad_probe dump_path (or rank directory) of run 2")
    parser.add_argument("-o", "--output", required=True, help="directory for similarities.csv and plots")


def _grad_compare_run(args: argparse.Namespace) -> int:
    from msprobe.core.grad_probe import compare_command

    return compare_command(args.input1, args.input2, args.output)


def _precision_compare_configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-npu", "--npu_csv_path", dest="npu_csv", required=True,
                        help="accuracy_checking_details_*.csv of run_ut on the device under test")
    parser.add_argument("-gpu", "--gpu_csv_path", dest="gpu_csv", required=True,
                        help="accuracy_checking_details_*.csv of run_ut on the trusted device")
    parser.add_argument("-o", "--out_path", dest="out_path", default=".", help="directory for the two reports")


def _precision_compare_run(args: argparse.Namespace) -> int:
    from msprobe.core.run_ut.precision_compare import main

    return main(args.npu_csv, args.gpu_csv, args.out_path)


def _monitor_configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    view = actions.add_parser("view", help="the monitor's files as one self-contained HTML page (docs/monitor.md)")
    view.add_argument("-i", "--input", required=True, help="a rank's monitor folder, or the folder above several")
    view.add_argument("-o", "--output", required=True, help="the HTML file to write")


def _monitor_run(args: argparse.Namespace) -> int:
    from msprobe.core.monitor.view import ViewError, write_view

    try:
        print(f"monitor view written: {write_view(args.input, args.output)}")
    except (ViewError, OSError) as error:
        print(f"msprobe monitor view: {error}", file=sys.stderr)
        return 1
    return 0


def _anomaly_origin_configure(parser: argparse.ArgumentParser) -> None:
    from msprobe.core.anomaly.command import configure

    configure(parser)


def _anomaly_origin_run(args: argparse.Namespace) -> int:
    from msprobe.core.anomaly.command import run

    return run(args)


_ANOMALY_ORIGIN = Command("the first API, over every rank of a statistics dump, that turned finite inputs "
                          "into inf/NaN", _anomaly_origin_configure, _anomaly_origin_run)

CORE_COMMANDS: dict[str, Command] = {
    "monitor": Command("the training-state monitor's output: monitor view -i DIR -o page.html",
                       _monitor_configure, _monitor_run),
    "grad_compare": Command(
        "compare the gradient directions of two grad_probe runs", _grad_compare_configure, _grad_compare_run
    ),
    "api_precision_compare": Command(
        "run_ut stage 2: judge the device's details CSV against a trusted device's",
        _precision_compare_configure, _precision_compare_run,
    ),
    "anomaly_origin": _ANOMALY_ORIGIN,
    "overflow_check": _ANOMALY_ORIGIN,  # msprobe 26.2.0's name for the same search (docs/anomaly_origin.md)
}


def installed_versions() -> dict[str, str]:
    versions = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _version_text() -> str:
    versions = installed_versions()
    if not versions:
        return "msprobe (no msprobe distribution metadata found: running from a source tree?)"
    return "\n".join(f"{dist} {version}" for dist, version in versions.items())


def _framework_commands(framework: str) -> Mapping[str, Command]:
    if framework not in installed_frameworks():
        raise SystemExit(
            f"msprobe: the {framework} framework is not installed; install it with: "
            f"pip install {FRAMEWORKS[framework]}"
        )
    return framework_named(framework).commands


def build_parser(framework: str, commands: Mapping[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msprobe",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="msprobe: precision debugging for PyTorch and MindSpore training.",
        epilog=f"installed frameworks: {', '.join(sorted(installed_frameworks())) or 'none'}",
    )
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="<command>", title=f"commands ({framework})")
    for name, command in commands.items():
        command.configure(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--framework", choices=sorted(FRAMEWORKS), default="pytorch",
        help="framework whose commands to run (default: pytorch)",
    )
    parser.add_argument("--version", action="version", version=_version_text())


def _global_part(argv: list[str]) -> int:
    """How many leading arguments are global options: those before the command's name. A command's own
    flags may reuse a global letter (``compare -f`` fuzzy matching, ``run_ut -f`` de-duplication)."""
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        index += 2 if argv[index] in ("-f", "--framework") else 1
    return min(index, len(argv))


def main(argv: Sequence[str] | None = None) -> int:
    use_console()
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_global_options(pre)
    head = _global_part(argv)
    known, rest = pre.parse_known_args(argv[:head])
    rest += argv[head:]
    wants_help = not rest or rest[0] in ("-h", "--help")
    commands: dict[str, Command] = dict(CORE_COMMANDS)
    # a core command (grad_compare) needs no framework package; help lists the framework's when installed
    core_command = bool(rest) and rest[0] in CORE_COMMANDS
    if known.framework in installed_frameworks() or not (wants_help or core_command):
        commands.update(_framework_commands(known.framework))
    parser = build_parser(known.framework, commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    load_builtin_tasks()  # a command that reads a config.json (run_ut) finds every task
    return int(commands[args.command].run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
