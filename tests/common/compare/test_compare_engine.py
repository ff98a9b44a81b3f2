"""The engine end to end on dumps generated here with numpy (.npy tensors), and on 1.1.1's headers."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import openpyxl
import pytest

from msprobe.core.compare import CompareError, CompareOptions, compare_dumps
from msprobe.core.compare.command import compare_command
from msprobe.core.compare.distributed import compare_steps
from msprobe.core.compare.read.tensorfile import load_npy
from msprobe.core.compare.report.progress import Progress
from msprobe.core.compare.report.table import columns
from msprobe.core.compare.report.xlsx import write_xlsx

DATA = Path(__file__).parents[1] / "data" / "compare_ref"


def tensor_value(array: np.ndarray, data_name: str) -> dict:
    a = array.astype(np.float64)
    return {"type": "mindspore.Tensor", "dtype": "Float32", "shape": list(array.shape), "Max": a.max(),
            "Min": a.min(), "Mean": a.mean(), "Norm": float(np.linalg.norm(a)), "data_name": data_name}


def write_dump(rank_dir: Path, calls: list[tuple[str, list[np.ndarray], list[np.ndarray]]], task="tensor") -> Path:
    """A dump.json (+ .npy files) of forward calls ``(entry, inputs, outputs)``, as msprobe writes them."""
    tensors = rank_dir / "dump_tensor_data"
    tensors.mkdir(parents=True)
    data = {}
    for entry, inputs, outputs in calls:
        record = {"input_args": [], "input_kwargs": {}, "output": []}
        for part, key, arrays in (("input", "input_args", inputs), ("output", "output", outputs)):
            for i, array in enumerate(arrays):
                name = f"{entry}.{part}.{i}.npy"
                np.save(tensors / name, array)
                record[key].append(tensor_value(array, name))
        data[entry] = record
    (rank_dir / "dump.json").write_text(json.dumps({"task": task, "level": "L1", "dump_data_dir": None, "data": data}))
    (rank_dir / "stack.json").write_text(json.dumps({e: [f"File model.py, line {i}, in forward"]
                                                     for i, (e, _, _) in enumerate(calls)}))
    return rank_dir / "dump.json"


@pytest.fixture
def pair(tmp_path):
    """NPU side with an extra API and an error introduced in Torch.mul; bench in float64-exact terms."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = np.exp(x)
    bad = (y * 2 + rng.normal(0, 0.5, y.shape)).astype(np.float32)
    npu_calls = [("Torch.exp.0.forward", [x], [y]), ("Torch.cast.0.forward", [y], [y]),
                 ("Torch.mul.0.forward", [y], [bad]), ("Torch.sum.0.forward", [bad], [bad.sum(keepdims=True)])]
    bench_calls = [("Torch.exp.0.forward", [x], [y]), ("Torch.mul.0.forward", [y], [y * 2]),
                   ("Torch.sum.0.forward", [y * 2], [(y * 2).sum(keepdims=True)])]
    npu = write_dump(tmp_path / "npu" / "rank", npu_calls)
    return npu, write_dump(tmp_path / "bench" / "rank", bench_calls), bad, y


def test_extra_api_does_not_shift_and_first_divergence_is_found(pair, tmp_path):
    npu, bench, bad, y = pair
    result = compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(with_stack=True, workers=1))
    names = [(r.npu.name if r.npu else None, r.bench.name if r.bench else None, r.verdict) for r in result.results]
    assert ("Torch.cast.0.forward.input.0", None, "Unmatched") in names
    assert ("Torch.sum.0.forward.input.0", "Torch.sum.0.forward.input.0", "No") in names
    assert result.first_divergence.entry == "Torch.mul.0.forward"
    assert result.first_divergence.inputs_pass
    assert result.first_divergence.stack == ["File model.py, line 2, in forward"]
    mul_out = next(r for r in result.results if r.npu and r.npu.name == "Torch.mul.0.forward.output.0")
    n, b = bad.astype(np.float64).ravel(), (y * 2).astype(np.float64).ravel()
    assert mul_out.tensor.cosine == pytest.approx(n @ b / np.linalg.norm(n) / np.linalg.norm(b), rel=1e-12)
    assert mul_out.highlight == "red"


def test_reports_columns_highlights_and_html(pair, tmp_path):
    npu, bench, _, _ = pair
    result = compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(with_stack=True, workers=1))
    xlsx = result.reports["xlsx"]
    assert re.fullmatch(r"compare_result_\d{14}\.xlsx", xlsx.name)
    sheet = openpyxl.load_workbook(xlsx).active
    header = [c.value for c in sheet[1]]
    assert header == columns("tensor", True)
    red = [row[0].value for row in sheet.iter_rows(min_row=2) if row[0].fill.fgColor.rgb == "FFFF0000"]
    assert "Torch.mul.0.forward.output.0" in red
    csv_text = result.reports["csv"].read_text()
    assert csv_text.splitlines()[0].split(",")[:3] == ["NPU Name", "Bench Name", "NPU Dtype"]
    page = result.reports["html"].read_text()
    assert "<script src" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.index("First divergence: Torch.mul.0.forward") < page.index("Worst rows") < page.index("All rows")


@pytest.mark.parametrize("mode, reference", [("tensor", "cmp_tensor_L1"), ("summary", "cmp_statistics_mix"),
                                             ("md5", "cmp_md5_L1")])
def test_columns_equal_1_1_1(mode, reference):
    sheet = openpyxl.load_workbook(DATA / f"{reference}.xlsx").active
    want = [c.value for c in sheet[1]]
    assert columns(mode, with_stack=True) == want
    assert columns(mode, with_stack=False) == [c for c in want if c != "NPU_Stack_Info"]


def test_xlsx_continues_on_further_sheets(tmp_path):
    path = tmp_path / "r.xlsx"
    sheets = write_xlsx(path, ["a", "b"], (([i, str(i)], "") for i in range(7)), max_rows=3)
    book = openpyxl.load_workbook(path)
    assert sheets == 4 and book.sheetnames == ["Sheet", "Sheet2", "Sheet3", "Sheet4"]
    assert [c.value for c in book["Sheet2"][1]] == ["a", "b"] and book["Sheet4"]["A2"].value == 6


def test_xlsx_cells_keep_every_digit_escape_text_and_style_whole_rows(tmp_path):
    path = tmp_path / "r.xlsx"
    rows = [([0.1 + 0.2, 0.25, "a<b & c>\n  d\x01"], "red"), ([float("inf"), float("nan"), 2**60], "yellow"),
            ([-1e-300, "N/A", "None"], "")]
    write_xlsx(path, ["x", "MaxRelativeErr", "z"], iter(rows), {"MaxRelativeErr"})
    sheet = openpyxl.load_workbook(path).active
    values = [[c.value for c in row] for row in sheet.iter_rows(min_row=2)]
    assert values == [[0.30000000000000004, 0.25, "a<b & c>\n  d"], ["inf", "nan", 2**60], [-1e-300, "N/A", "None"]]
    assert all(c.font.b for c in sheet[1]) and not sheet["A2"].font.b
    assert [sheet[f"A{r}"].fill.fgColor.rgb for r in (2, 3, 4)] == ["FFFF0000", "FFFFFF00", "00000000"]
    assert sheet["B2"].number_format == "0.0000%" and sheet["A2"].number_format == "General"


def test_parallel_workers_give_the_same_numbers(tmp_path):
    rng = np.random.default_rng(1)
    calls = [(f"Torch.add.{i}.forward", [rng.standard_normal(50).astype(np.float32)], [np.ones(3, np.float32)])
             for i in range(40)]
    noisy = [(e, [a[0] * 1.01], o) for e, a, o in calls]
    npu, bench = write_dump(tmp_path / "n", noisy), write_dump(tmp_path / "b", calls)
    one = compare_dumps(npu, bench, tmp_path / "o1", load_npy, options=CompareOptions(workers=1, progress=False))
    two = compare_dumps(npu, bench, tmp_path / "o2", load_npy, options=CompareOptions(workers=2, progress=False))
    assert [r.tensor.cosine for r in one.results] == [r.tensor.cosine for r in two.results]


def test_mismatched_tasks_and_bad_files_name_the_file(pair, tmp_path):
    npu, bench, _, _ = pair
    calls = [("Torch.exp.0.forward", [np.ones(2)], [np.ones(2)])]
    stats = write_dump(tmp_path / "s" / "rank", calls, task="statistics")
    with pytest.raises(CompareError, match="tensor dump.*summary dump"):
        compare_dumps(npu, stats, tmp_path / "o", load_npy)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CompareError, match=re.escape(str(broken))):
        compare_dumps(npu, broken, tmp_path / "o", load_npy)
    with pytest.raises(CompareError, match="npu_path.*does not exist"):
        compare_dumps(tmp_path / "missing.json", bench, tmp_path / "o", load_npy)


def test_cli_command_and_its_errors(pair, tmp_path, msprobe_log):
    npu, bench, _, _ = pair
    import argparse

    command = compare_command(lambda: load_npy)
    parser = argparse.ArgumentParser()
    command.configure(parser)
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench), "is_print_compare_log": True}))
    out = tmp_path / "cli"
    assert command.run(parser.parse_args(["-i", str(config), "-o", str(out), "-s", "-j", "1"])) == 0
    assert len(list(out.glob("compare_result_*.xlsx"))) == 1
    assert "first divergence: Torch.mul.0.forward" in msprobe_log.text()
    config.write_text(json.dumps({"npu_path": str(npu)}))
    assert command.run(parser.parse_args(["-i", str(config), "-o", str(out)])) == 2
    assert "'bench_path' is missing" in msprobe_log.text()


def test_multi_rank_compares_each_rank_and_names_the_first_divergent_one(tmp_path):
    x = np.linspace(-1, 1, 32).astype(np.float32)
    good = [("Torch.exp.0.forward", [x], [np.exp(x)]), ("Torch.mul.0.forward", [np.exp(x)], [np.exp(x) * 2])]
    late = [good[0], ("Torch.mul.0.forward", [np.exp(x)], [-np.exp(x)])]
    early = [("Torch.exp.0.forward", [x], [-np.exp(x)]), good[1]]
    for rank, calls in enumerate([good, late, early]):
        write_dump(tmp_path / "npu" / "step0" / f"rank{rank}", calls)
        write_dump(tmp_path / "bench" / "step0" / f"rank{rank}", good)
    result = compare_steps(tmp_path / "npu" / "step0", tmp_path / "bench" / "step0", tmp_path / "out", load_npy,
                           CompareOptions(workers=2, progress=False))
    assert sorted(result.ranks) == [0, 1, 2] and result.first_rank == 2
    assert result.ranks[0].first_divergence is None
    assert len(list((tmp_path / "out").glob("compare_result_rank*_*.xlsx"))) == 3
    summary = result.summary.read_text().splitlines()
    assert summary[3].startswith("2,") and "Torch.exp.0.forward" in summary[3]


def embedded(page: str) -> dict:
    return json.loads(page.split("const DATA = ", 1)[1].split(";\nconst cols", 1)[0])


def test_html_table_is_capped_but_keeps_divergence_and_worst_rows_and_points_to_the_full_table(tmp_path):
    from msprobe.core.compare.judge.divergence import worst_rows
    from msprobe.core.compare.report.html import write_html
    from msprobe.core.compare.report.table import row_cells

    x = np.linspace(1, 2, 4).astype(np.float32)
    calls = [(f"Torch.add.{i}.forward", [x], [x + 1]) for i in range(150)]
    noisy = list(calls)
    noisy[120] = ("Torch.add.120.forward", [x], [(x + 1) * 3])  # the first divergence, far past the cap
    noisy[140] = ("Torch.add.140.forward", [x * 2], [(x + 1) * 5])  # fails, but its input already fails
    npu = write_dump(tmp_path / "n", noisy, task="statistics")
    bench = write_dump(tmp_path / "b", calls, task="statistics")
    result = compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(workers=1, progress=False))
    assert result.first_divergence.entry == "Torch.add.120.forward" and len(result.results) == 300
    full = embedded(result.reports["html"].read_text())
    assert [r["n"] for r in full["rows"]] == list(range(1, 301))

    page_path = tmp_path / "capped.html"
    shown = write_html(page_path, result, columns("summary", False), lambda r: row_cells(r, False, {}),
                       [result.reports["xlsx"], result.reports["csv"]], max_rows=40)
    page = page_path.read_text()
    rows = embedded(page)["rows"]
    numbers = [r["n"] for r in rows]
    assert shown == len(rows) == 40 and numbers == sorted(numbers)
    by_name = {r["c"][0]: r for r in rows}
    assert {"Torch.add.120.forward.input.0", "Torch.add.120.forward.output.0"} <= set(by_name)
    assert by_name["Torch.add.120.forward.output.0"]["n"] == 242 and by_name["Torch.add.120.forward.output.0"]["h"]
    worst_names = {r.npu.name for r in worst_rows(result.results) if r.failed}
    assert worst_names and worst_names <= set(by_name)
    assert "40 of 300 rows embedded" in page and result.reports["xlsx"].name in page
    assert result.reports["csv"].name in page


def test_chart_keeps_a_single_bad_row_visible_among_many():
    from msprobe.core.compare.judge.metrics import TensorMetrics
    from msprobe.core.compare.judge.verdict import RowResult
    from msprobe.core.compare.report.html import CHART_POINTS, _buckets

    results = [RowResult(None, None, "tensor", tensor=TensorMetrics(cosine=1.0, max_relative_err=1e-4))
               for _ in range(5 * CHART_POINTS + 3)]
    results[7777] = RowResult(None, None, "tensor", tensor=TensorMetrics(cosine=0.2, max_relative_err=float("inf")))
    points = _buckets(results)
    assert len(points) <= CHART_POINTS and min(c for c, _ in points) == 0.2
    assert max(r for _, r in points) == 1e-4  # inf has no place on a log scale; the row is shown by its cosine



def test_worst_rows_leave_out_rows_without_a_measure():
    """Non-tensor arguments compared by value have no number to rank by: they do not pad the list."""
    from msprobe.core.compare.judge.divergence import worst_rows
    from msprobe.core.compare.judge.metrics import TensorMetrics
    from msprobe.core.compare.judge.verdict import RowResult
    from msprobe.core.compare.read.rows import Row

    def result(suffix: str, value: dict, tensor: TensorMetrics | None, verdict: str) -> RowResult:
        row = Row("Torch.add.0.forward", suffix, "input", value)
        return RowResult(row, row, "tensor", tensor=tensor, verdict=verdict)

    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2]}
    good = result("input.0", tensor, TensorMetrics(cosine=0.9999, max_relative_err=1e-6), "Yes")
    bad = result("output.0", tensor, TensorMetrics(cosine=0.5, max_relative_err=0.3), "No")
    scalar = result("input.1", {"type": "int", "value": 1}, None, "N/A")
    assert worst_rows([scalar, good, bad]) == [bad, good]


def test_xlsx_failure_while_writing_leaves_no_file_and_raises_the_error_itself(tmp_path):
    def rows():
        yield [1.0, "a"], ""
        raise RuntimeError("row 2 broke")

    with pytest.raises(RuntimeError, match="row 2 broke"):
        write_xlsx(tmp_path / "r.xlsx", ["a", "b"], rows(), max_rows=2)  # also across a sheet change
    assert list(tmp_path.iterdir()) == []


def test_xlsx_numpy_floats_keep_every_digit(tmp_path):
    path = tmp_path / "r.xlsx"
    write_xlsx(path, ["a", "b"], iter([([np.float64(0.1) + np.float64(0.2), np.float64(-1e-300)], "")]))
    assert [c.value for c in openpyxl.load_workbook(path).active[2]] == [0.30000000000000004, -1e-300]


def test_compare_modules_import_each_other_without_a_loop():
    """engine builds CompareResult and calls the report writers, which read it: both import compare.result."""
    import ast

    import msprobe.core.compare as package

    root, prefix = Path(package.__file__).parent, package.__name__ + "."
    imports = {path.stem: {node.module.rsplit(".", 1)[1] for node in ast.walk(ast.parse(path.read_text()))
                           if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix)}
               for path in root.glob("*.py")}

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        return any(d == target or (d not in seen and reaches(d, target, seen | {d})) for d in imports.get(start, ()))

    assert [m for m in imports if reaches(m, m, {m})] == []


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def stderr_to(monkeypatch, stream: io.StringIO) -> io.StringIO:
    """Replace stderr for the rest of the test (in its body: pytest's capture resets it between phases)."""
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_progress_bar_on_a_terminal_ends_its_line(monkeypatch):
    terminal = stderr_to(monkeypatch, Terminal())
    bar = Progress(10, "Compare tensors")
    for _ in range(10):
        bar.advance()
    bar.close()
    bar.close()
    text = terminal.getvalue()
    assert "Compare tensors" in text and "10/10" in text and text.endswith("\n")


def test_progress_bar_on_a_pty_of_unknown_size(monkeypatch):
    """A fresh pty reports 0 x 0 on Linux (as under script or docker -t); tqdm alone would hide the bar."""
    master, slave = os.openpty()
    chunks = []
    try:
        with io.TextIOWrapper(io.FileIO(slave, "w"), write_through=True) as stream, monkeypatch.context() as patch:
            patch.setattr(sys, "stderr", stream)  # put back before the stream (and the slave) closes
            bar = Progress(5, "Compare tensors")
            for _ in range(5):
                bar.advance()
            bar.close()
        while True:  # a few hundred bytes: the pty holds them until read; EIO once read, the slave being closed
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    drawn = b"".join(chunks).decode()
    assert "Compare tensors: 100%" in drawn and "5/5" in drawn


def test_progress_without_a_terminal_logs_a_few_lines_and_draws_nothing(monkeypatch, msprobe_log):
    stream = stderr_to(monkeypatch, io.StringIO())
    bar = Progress(8, "Compare tensors")
    for _ in range(8):
        bar.advance()
    bar.close()
    assert stream.getvalue() == ""
    assert msprobe_log.messages == [f"Compare tensors: {n}/8" for n in (1, 2, 4, 6, 8)]


def small_tensor_pair(tmp_path: Path, calls: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    bench = [(f"Torch.add.{i}.forward", [rng.standard_normal(20).astype(np.float32)], [np.ones(2, np.float32)])
             for i in range(calls)]
    npu = [(e, [a[0] * 1.001], o) for e, a, o in bench]
    return write_dump(tmp_path / "n", npu), write_dump(tmp_path / "b", bench)


def test_progress_bar_beside_worker_processes(tmp_path, monkeypatch):
    npu, bench = small_tensor_pair(tmp_path, 20)  # 40 tensor pairs: enough for the worker pool
    terminal = stderr_to(monkeypatch, Terminal())
    result = compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(workers=2))
    assert len(result.results) == 40 and result.not_compared == 0
    assert "40/40" in terminal.getvalue() and terminal.getvalue().endswith("\n")


def test_progress_off_draws_nothing(tmp_path, monkeypatch):
    npu, bench = small_tensor_pair(tmp_path, 3)
    terminal = stderr_to(monkeypatch, Terminal())
    compare_dumps(npu, bench, tmp_path / "out", load_npy, options=CompareOptions(workers=1, progress=False))
    assert terminal.getvalue() == ""
