"""``msprobe anomaly_origin -i STEP_DIR [-o OUT]`` (alias ``overflow_check``): docs/anomaly_origin.md."""

from __future__ import annotations

import argparse

from msprobe.core.anomaly.dumps import AnomalyError, read_step
from msprobe.core.anomaly.origin import find_origins
from msprobe.core.anomaly.report import console_line, write_report


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_path", required=True,
                        help="a step directory of a statistics dump (dump/step0), every rank inside it")
    parser.add_argument("-o", "--output_path", default="./output",
                        help="directory for anomaly_origin.json (default ./output)")


def run(args: argparse.Namespace) -> int:
    """Exit 0 whether or not inf/NaN was found (the report says which), 2 when the input cannot be read."""
    try:
        origins = find_origins(read_step(args.input_path))
    except AnomalyError as error:
        print(f"msprobe anomaly_origin: {error}")
        return 2
    path = write_report(args.output_path, args.input_path, origins)
    if not origins:
        print(f"no inf/NaN in {args.input_path}; report: {path}")
        return 0
    print(f"first inf/NaN: {console_line(origins[0])}")
    for other in origins[1:]:
        print(f"also: {console_line(other)}")
    print(f"report: {path}")
    return 0
