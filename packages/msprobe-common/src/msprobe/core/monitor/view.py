"""``msprobe monitor view -i DIR -o page.html``: the monitor's CSV files (ours or upstream's: the layout is
the same) and alerts as one self-contained HTML page — a heat map module × step per metric, one line per
rank for a clicked module, the alerts marked on the map and listed.

``DIR`` is a rank's folder (``...-rank0-1a2b3c4d``) or the folder above several; a folder's rank is read
from its name. The page embeds its data and loads nothing from the network.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

from msprobe.core.monitor.alerts import ANOMALIES_FILE
from msprobe.core.monitor.records import MICRO_STEP_GROUPS
from msprobe.core.services.fileio import atomic_write_text

_FILE = re.compile(r"(?P<group>[a-z_]+)_(?P<first>\d+)-(?P<last>\d+)\.csv")
_RANK = re.compile(r"-rank(\d+)-")
_NOT_OPS = {"vpp_stage", "name", "step", "micro_step", "shape", "dtype"}


class ViewError(ValueError):
    """The input folder holds no monitor output."""


def rank_folders(root: Path) -> dict[int, Path]:
    folders = [root] if any(_FILE.fullmatch(p.name) for p in root.glob("*.csv")) else sorted(
        p for p in root.iterdir() if p.is_dir() and any(_FILE.fullmatch(f.name) for f in p.glob("*.csv")))
    if not folders:
        raise ViewError(f"{str(root)!r} holds no monitor CSV files ({{group}}_{{first}}-{{last}}.csv), "
                        "nor folders of them")
    ranks = {}
    for index, folder in enumerate(folders):
        match = _RANK.search(folder.name)
        ranks[int(match.group(1)) if match else index] = folder
    return ranks


def _target(group: str, row: dict) -> str:
    micro = row.get("micro_step")
    return f"{row['name']}:{micro}" if group in MICRO_STEP_GROUPS and micro not in (None, "", "0") else row["name"]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def collect(ranks: dict[int, Path]) -> dict:
    """{metrics: {"actv.norm": {targets: [...], steps: [...], values: {rank: {target: {step: value}}}}}, alerts}."""
    metrics: dict[str, dict] = {}
    for rank, folder in ranks.items():
        for path in sorted(folder.glob("*.csv"), key=lambda p: p.name):
            match = _FILE.fullmatch(path.name)
            if not match:
                continue
            group = match.group("group")
            with path.open(newline="", encoding="utf-8") as handle:
                for row in csv.DictReader(handle):
                    target, step = _target(group, row), int(row["step"])
                    for op in (key for key in row if key not in _NOT_OPS):
                        metric = metrics.setdefault(f"{group}.{op}", {"targets": {}, "steps": set(), "values": {}})
                        metric["targets"].setdefault(target, None)
                        metric["steps"].add(step)
                        metric["values"].setdefault(rank, {}).setdefault(target, {})[step] = _number(row[op])
    for metric in metrics.values():
        metric["targets"] = list(metric["targets"])  # first appearance: execution order
        metric["steps"] = sorted(metric["steps"])
    return {"metrics": metrics, "ranks": sorted(ranks), "alerts": _alerts(ranks)}


def _alerts(ranks: dict[int, Path]) -> list[dict]:
    alerts = []
    for folder in ranks.values():
        path = folder / ANOMALIES_FILE
        if path.is_file():
            alerts.extend(json.loads(path.read_text(encoding="utf-8")))
    return sorted(alerts, key=lambda a: (a["step"], a["rank"]))


def _json_for_html(data: dict) -> str:
    text = json.dumps(data, allow_nan=False, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finite(data: dict) -> dict:
    """NaN and inf as strings: JSON has no literal for them, and the page colours them apart."""
    for metric in data["metrics"].values():
        for per_rank in metric["values"].values():
            for series in per_rank.values():
                for step, value in series.items():
                    if value is not None and (value != value or value in (float("inf"), float("-inf"))):
                        series[step] = str(value)
    for alert in data["alerts"]:
        for key in ("value", "history_mean"):
            value = alert["first"].get(key)
            if isinstance(value, float) and (value != value or abs(value) == float("inf")):
                alert["first"][key] = str(value)
    return data


def write_view(input_dir: str | os.PathLike, output: str | os.PathLike) -> Path:
    data = _finite(collect(rank_folders(Path(input_dir))))
    page = (Path(__file__).with_name("view.html")).read_text(encoding="utf-8")
    atomic_write_text(output, page.replace("/*DATA*/null", _json_for_html(data)))
    return Path(output)

