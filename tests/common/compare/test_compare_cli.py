"""``msprobe -f pytorch compare`` end to end on copies of msprobe 1.1.1's own bf16-vs-fp32 dumps.

The compare.json files are 1.1.1's (reference-outputs/pytorch/cmp_*/compare.json) with their paths
rewritten to the copies; 1.1.1's compare_result xlsx of the same dumps gives the expected rows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openpyxl
import pytest

from msprobe.core import cli

pytestmark = pytest.mark.frameworks("pytorch")  # the compare command comes with a framework

TESTS = Path(__file__).parents[2]
DUMPS = TESTS / "pytorch" / "data" / "compare_ref"
REFERENCE = TESTS / "data" / "reference-outputs" / "pytorch"
REFERENCE_XLSX = Path(__file__).parents[1] / "data" / "compare_ref"


def compare_config(tmp_path: Path, kind: str, relative: bool = False) -> Path:
    """1.1.1's compare.json of ``cmp_{kind}`` next to copies of its dumps, paths absolute or left relative."""
    config = json.loads((REFERENCE / f"cmp_{kind}" / "compare.json").read_text())
    for key in ("npu_path", "bench_path", "stack_path"):
        side = config[key].split("/", 1)[0]
        if not (tmp_path / side).exists():
            shutil.copytree(DUMPS / side, tmp_path / side)
        if not relative:
            config[key] = str(tmp_path / config[key])
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(config))
    return path


def run_msprobe(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msprobe.core", "-f", "pytorch", "compare", *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def sheet_rows(path: Path) -> list[dict]:
    rows = list(openpyxl.load_workbook(path).active.iter_rows(values_only=True))
    return [dict(zip(rows[0], row)) for row in rows[1:]]


def first_failing_from_sheet(rows: list[dict]) -> str:
    """The earliest forward entry with a failing output and passing inputs, else the same among backward ones,
    worked out from the xlsx's 1.1.1 verdict column alone (what the first divergence used to be)."""
    entries: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        entry, part = re.match(r"(.+\.(?:forward|backward))\.(input|output)\.", row["NPU Name"]).groups()
        entries.setdefault(entry, {}).setdefault(part, []).append(row["Accuracy Reached or Not"])
    for direction in ("forward", "backward"):
        for entry, parts in entries.items():
            if entry.endswith(direction) and "No" in parts.get("output", []) and "No" not in parts.get("input", []):
                return entry
    raise AssertionError("no failing row in the sheet")


def excess_by_numpy(npu_dir: Path, bench_dir: Path, entry: str, record: dict) -> float:
    """The worst output's ‖n − b‖ / (slack · 2^-8 · scale), from the .pt files in float64: the rounding rule of
    docs/compare.md (slack 8 forward, 128 backward; a backward entry's scale is at least its inputs' norm)."""
    import torch

    def load(directory: Path, name: str) -> np.ndarray:
        return torch.load(directory / name, weights_only=True).double().numpy().ravel()

    backward = entry.endswith("backward")
    names = {part: [v["data_name"] for v in record.get(part, []) if isinstance(v, dict) and v.get("data_name")]
             for part in ("input", "input_args", "output")}
    inputs = names["input"] + names["input_args"]
    floor = max((max(np.linalg.norm(load(npu_dir, n)), np.linalg.norm(load(bench_dir, n))) for n in inputs),
                default=0.0) if backward else 0.0
    worst = 0.0
    for name in names["output"]:
        n, b = load(npu_dir, name), load(bench_dir, name)
        scale = max(np.linalg.norm(n), np.linalg.norm(b), floor)
        worst = max(worst, np.linalg.norm(n - b) / ((128 if backward else 8) * 2.0**-8 * scale) if scale else 0.0)
    return worst


def test_tensor_compare_as_a_user_runs_it(tmp_path):
    """1.1.1's bf16 and fp32 dumps of one training step: 1.1.1's verdict fails rows that are bf16 rounding, and the
    first divergence names none of them; scaling one saved output by 1.05 makes that entry the first divergence."""
    import torch

    config = compare_config(tmp_path, "tensor_L1")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = run_msprobe("-i", str(config), "-o", str(tmp_path / "out"), "-s", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    reports = {p.suffix: p for p in (tmp_path / "out").iterdir()}
    assert sorted(reports) == [".csv", ".html", ".xlsx"]
    rows = sheet_rows(reports[".xlsx"])
    theirs = sheet_rows(REFERENCE_XLSX / "cmp_tensor_L1.xlsx")
    assert [r["NPU Name"] for r in rows] == [r["NPU Name"] for r in theirs]  # 44 rows, same order as 1.1.1
    assert all(r["Bench Name"] == r["NPU Name"] for r in rows)  # 1.1.1 matched 12 of them, we match all
    assert len(reports[".csv"].read_text().splitlines()) == len(rows) + 1
    assert first_failing_from_sheet(rows) == "Functional.relu.0.backward"  # 1.1.1's verdict column is kept
    settings = json.loads(config.read_text())
    npu_dir, bench_dir = (Path(settings[k]).parent / "dump_tensor_data" for k in ("npu_path", "bench_path"))
    records = json.loads(Path(settings["npu_path"]).read_text())["data"]
    excess = {entry: excess_by_numpy(npu_dir, bench_dir, entry, record) for entry, record in records.items()}
    assert 0.05 < max(excess.values()) < 1  # every difference is within rounding...
    assert "first divergence: none" in done.stderr  # ...so nothing is named

    linear_out = npu_dir / "Functional.linear.0.forward.output.0.pt"
    torch.save(torch.load(linear_out, weights_only=True) * 1.05, linear_out)
    linear = "Functional.linear.0.forward"
    assert excess_by_numpy(npu_dir, bench_dir, linear, records[linear]) > 1
    done = run_msprobe("-i", str(config), "-o", str(tmp_path / "out2"), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    console = [line for line in done.stderr.splitlines() if "first divergence:" in line]
    assert len(console) == 1 and "first divergence: Functional.linear.0.forward (its inputs pass;" in console[0]
    assert "File mk_pt.py" in console[0]  # the user's frame from stack.json
    assert "first divergence from statistics" not in done.stderr  # a tensor compare saw every element
    [page] = (tmp_path / "out2").glob("*.html")
    assert "First divergence: Functional.linear.0.forward" in page.read_text()


@pytest.mark.parametrize("kind, verdict_column", [("statistics_mix", "Result"), ("md5_L1", "Result")])
def test_relative_paths_resolve_from_compare_json_and_rows_follow_1_1_1(kind, verdict_column, tmp_path, monkeypatch):
    config = compare_config(tmp_path, kind, relative=True)
    monkeypatch.chdir(tmp_path.parent)
    assert cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(tmp_path / "out")]) == 0
    [xlsx] = (tmp_path / "out").glob("compare_result_*.xlsx")
    rows = sheet_rows(xlsx)
    theirs = sheet_rows(REFERENCE_XLSX / f"cmp_{kind}.xlsx")
    assert [r["NPU Name"] for r in rows] == [r["NPU Name"] for r in theirs]
    assert all(r["Bench Name"] == r["NPU Name"] and r[verdict_column] != "Unmatched" for r in rows)


def test_mismatched_tasks_fail_with_exit_code_2_naming_both_files(tmp_path):
    config = compare_config(tmp_path, "tensor_L1")
    settings = json.loads(config.read_text())
    shutil.copytree(DUMPS / "pt_statistics_mix_fp32", tmp_path / "stats")
    settings["bench_path"] = str(tmp_path / "stats/step0/rank/dump.json")
    config.write_text(json.dumps(settings))
    done = run_msprobe("-i", str(config), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert f"npu_path {settings['npu_path']!r} is a tensor dump" in done.stderr
    assert f"bench_path {settings['bench_path']!r} is a summary dump" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_missing_and_broken_files_are_named(tmp_path, msprobe_log):
    config = compare_config(tmp_path, "md5_L1")
    settings = json.loads(config.read_text())

    def run(config_path: Path) -> int:
        return cli.main(["-f", "pytorch", "compare", "-i", str(config_path), "-o", str(tmp_path / "out")])

    assert run(tmp_path / "no_such.json") == 2
    assert f"compare input file {str(tmp_path / 'no_such.json')!r} does not exist" in msprobe_log.text()
    broken = tmp_path / "broken.json"
    broken.write_text('{"npu_path": ')
    assert run(broken) == 2
    assert f"compare input file {str(broken)!r} is not valid JSON" in msprobe_log.text()
    missing_dump = tmp_path / "gone" / "dump.json"
    config.write_text(json.dumps({**settings, "bench_path": str(missing_dump)}))
    assert run(config) == 2
    assert f"bench_path {str(missing_dump)!r} does not exist" in msprobe_log.text()
    Path(settings["npu_path"]).write_text('{"task": "statistics", "data": {')
    config.write_text(json.dumps(settings))
    assert run(config) == 2
    assert f"npu_path {settings['npu_path']!r} is not valid JSON" in msprobe_log.text()
    assert not (tmp_path / "out").exists()


def test_a_statistics_divergence_whose_inputs_pass_says_what_a_tensor_dump_would_tell(tmp_path):
    """Statistics average element deviations away (docs/compare.md#what-statistics-cannot-see): when a statistics
    compare names an entry whose inputs pass, the console says a tensor dump of it tells; a tensor compare not."""
    config = compare_config(tmp_path, "statistics_mix")
    npu = Path(json.loads(config.read_text())["npu_path"])
    dump = json.loads(npu.read_text())
    for key in ("Max", "Min", "Mean", "Norm"):  # the output 5 % off: 12.8 bf16 units, its inputs untouched
        dump["data"]["Functional.linear.0.forward"]["output"][0][key] *= 1.05
    npu.write_text(json.dumps(dump))
    done = run_msprobe("-i", str(config), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "first divergence: Functional.linear.0.forward (its inputs pass;" in done.stderr
    hint = [line for line in done.stderr.splitlines() if "first divergence from statistics" in line]
    assert len(hint) == 1 and "a tensor dump of Functional.linear.0.forward and its inputs" in hint[0]
