"""The answer of an anomaly search: one console line per origin and ``anomaly_origin.json``, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from msprobe.core.anomaly.origin import ARRIVED, INPUT, Origin, stack_line
from msprobe.core.services.fileio import atomic_write_text, make_dir

REPORT_NAME = "anomaly_origin.json"
_HOW = {
    "produced": "turned finite inputs into inf/NaN",
    INPUT: "received inputs that already held inf/NaN, made by nothing recorded (data, a parameter, an unrecorded API)",
    ARRIVED: "received inf/NaN through this collective from a rank that is not in the dump",
}


def console_line(origin: Origin) -> str:
    line = " ".join(stack_line(origin.stack).split())
    reached = f" (reached from {'; '.join(origin.via)})" if origin.via else ""
    return f"rank {origin.rank}: {origin.entry} {_HOW[origin.kind]}{reached} — {line or 'no stack recorded'}"


def write_report(output_dir: str | os.PathLike, step_dir: str | os.PathLike, origins: list[Origin]) -> Path:
    directory = make_dir(output_dir)
    path = directory / REPORT_NAME
    body = {"step_dir": str(step_dir), "found": bool(origins),
            "first": origins[0].as_json() if origins else None,
            "origins": [origin.as_json() for origin in origins]}
    atomic_write_text(path, json.dumps(body, indent=1, ensure_ascii=False) + "\n")
    return path
