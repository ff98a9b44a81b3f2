"""The framework-free half of ``multi_run_ut`` (msprobe.core.run_ut.parallel): split, run each part in
its own process, merge in order, move error data — with a part runner that needs no framework."""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.run_ut import judge_output
from msprobe.core.run_ut.parallel import PartError, plan_parts, run_parts, split_parts
from msprobe.core.run_ut.report import ApiRow, Report, output_row


def fake_part(fail_on: str | None, part_dir: str, apis: list[str]) -> tuple[int, str | None]:
    """A part runner: one API row per name; ``Bad.*`` APIs get an error output and error data."""
    if fail_on in apis:
        return 0, f"tensor file for {fail_on} is missing"
    report = Report(part_dir)
    for name in apis:
        bench = np.array([1.0, 2.0])
        device = bench * (1.1 if name.startswith("Bad.") else 1.0)
        out = f"{name}.forward.output.0"
        row = output_row(out, "torch.float64", "torch.float32", device, bench,
                         judge_output(out, "torch.float32", device, bench))
        report.add(ApiRow(name, row.verdict.status, "N/A", row.verdict.message, [row]))
        if name.startswith("Bad."):
            (Path(part_dir) / "error_data" / name).mkdir(parents=True)
            (Path(part_dir) / "error_data" / name / "input.0.pt").write_bytes(b"x")
    report.summary(seed=7)
    return len(apis), None


def _rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))[1:]


def test_split_and_plan() -> None:
    assert split_parts(list("abcde"), 2) == [["a", "b", "c"], ["d", "e"]]
    assert split_parts(list("ab"), 8) == [["a"], ["b"]]
    assert split_parts([], 4) == [[]]
    assert plan_parts(list("abcdefg"), 3) == [["a", "b", "c"], ["d", "e"], ["f", "g"]]


def test_run_parts_merges_in_order_and_moves_error_data(tmp_path: Path) -> None:
    names = ["Torch.add.0", "Bad.gelu.0", "Torch.mul.0", "Torch.sub.0", "Bad.exp.0"]
    errors = tmp_path / "errors"
    summary, judged = run_parts(functools.partial(fake_part, None), names, tmp_path / "out", parts=3,
                                error_data_dir=errors, white_list=["x"])
    assert judged == 5 and summary["parts"] == 3 and summary["white_list"] == ["x"] and summary["seed"] == 7
    result = next((tmp_path / "out").glob("accuracy_checking_result_*.csv"))
    assert [r[0] for r in _rows(result)] == names
    assert [r[1] for r in _rows(result)] == ["pass", "error", "pass", "pass", "error"]
    assert summary["forward"] == {"pass": 3, "error": 2} and len(summary["failures"]) == 2
    details = next((tmp_path / "out").glob("accuracy_checking_details_*.csv"))
    assert [r[0] for r in _rows(details)] == [f"{n}.forward.output.0" for n in names]
    assert sorted(p.name for p in errors.iterdir()) == ["Bad.exp.0", "Bad.gelu.0"]
    assert (errors / "Bad.gelu.0" / "input.0.pt").is_file()
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []
    assert json.loads(next((tmp_path / "out").glob("accuracy_checking_summary_*.json")).read_text())["apis"] == 5


def test_a_failing_part_is_named_and_the_temporary_folder_removed(tmp_path: Path) -> None:
    with pytest.raises(PartError, match="part 1: tensor file for Torch.sub.0 is missing"):
        run_parts(functools.partial(fake_part, "Torch.sub.0"), ["Torch.add.0", "Torch.mul.0", "Torch.sub.0"],
                  tmp_path, parts=2)
    assert list(tmp_path.iterdir()) == []
