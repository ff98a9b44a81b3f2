"""``api_precision_compare`` (run_ut stage 2): each algorithm against hand-computed values, and
msprobe 1.1.1's own details CSVs (tests/data/run_ut_111) read as they are."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from msprobe.core import cli
from msprobe.core.run_ut.precision_compare import (
    COMPARE_DETAIL_COLUMNS,
    REQUIRED_COLUMNS,
    api_precision_compare,
    ratio,
)
from msprobe.core.run_ut.report import DETAIL_COLUMNS

DATA = Path(__file__).resolve().parents[2] / "data" / "run_ut_111"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def _details(path: Path, rows: list[dict[str, object]]) -> Path:
    """A details CSV in our layout; cells not given are blank (' '), as 1.1.1 writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(DETAIL_COLUMNS)
        for row in rows:
            writer.writerow([row.get(c, " ") for c in DETAIL_COLUMNS])
    return path


def _benchmark(name: str, dtype: str = "torch.bfloat16", **numbers: float) -> dict[str, object]:
    base = {"小值域错误占比": 0.001, "均方根误差": 1e-3, "相对误差最大值": 0.01, "相对误差平均值": 1e-3,
            "误差均衡性": 1e-4}
    return {"API Name": name, "DEVICE Dtype": dtype, **base, **numbers}


def _judge(tmp_path: Path, npu: list[dict], gpu: list[dict]):
    result = api_precision_compare(_details(tmp_path / "npu.csv", npu), _details(tmp_path / "gpu.csv", gpu),
                                   tmp_path / "out")
    return {r.name: r for r in result.rows}, result


def test_ratio_rules() -> None:
    assert ratio(2.0, 4.0) == (0.5, True) and ratio(0.0, 0.0) == (1.0, True)
    assert ratio(1e-9, 0.0) == (math.inf, True)                 # only the GPU's is 0: as bad as it gets
    value, same = ratio(math.nan, math.nan)
    assert math.isnan(value) and same
    assert ratio(math.inf, math.inf)[1] and not ratio(math.inf, -math.inf)[1] and not ratio(math.inf, 1.0)[1]


@pytest.mark.parametrize("column, npu_value, status", [
    ("均方根误差", 1.5e-3, "Warning"), ("均方根误差", 2.5e-3, "error"), ("均方根误差", 0.9e-3, "pass"),
    ("相对误差最大值", 0.05, "Warning"), ("相对误差最大值", 0.11, "error"),   # max rel err: error above 10x
    ("小值域错误占比", 0.0025, "error"), ("相对误差平均值", 1.9e-3, "Warning"),
    ("误差均衡性", 1e-3, "pass"),   # EB ratio 10: reported, not counted (noise over noise)
    ("均方根误差", math.nan, "error"),  # NaN on the NPU only
])
def test_benchmark_ratios(tmp_path: Path, column: str, npu_value: float, status: str) -> None:
    name = "Functional.gelu.0.forward.output.0"
    rows, _ = _judge(tmp_path, [_benchmark(name, **{column: npu_value})], [_benchmark(name)])
    assert rows[name].standard == "benchmark" and rows[name].status == status
    assert rows[name].cells["比对算法"] == "标杆比对法"


def test_benchmark_eb_status_reported(tmp_path: Path) -> None:
    name = "Functional.gelu.0.forward.output.0"
    rows, result = _judge(tmp_path, [_benchmark(name, 误差均衡性=1e-3)], [_benchmark(name)])
    detail = _rows(result.details_csv)[0]
    assert float(detail["误差均衡性比值"]) == pytest.approx(10.0) and detail["误差均衡性判定结果"] == "error"
    assert detail["比对结果"] == "pass"


@pytest.mark.parametrize("dtype, mean, over, gpu_over, status", [
    ("torch.float32", 10.0, 0.5, 0.5, "pass"),      # mean ULP error < 64
    ("torch.float32", 100.0, 0.04, 0.01, "pass"),   # fraction over 32 ULP < 5 %
    ("torch.float32", 100.0, 0.1, 0.2, "pass"),     # no worse than the GPU
    ("torch.float32", 100.0, 0.1, 0.05, "error"),
    ("torch.bfloat16", 10.0, 0.0005, 0.0, "pass"),  # fraction over 1 ULP < 0.1 % (no mean rule)
    ("torch.bfloat16", 0.5, 0.002, 0.001, "error"),
])
def test_ulp(tmp_path: Path, dtype: str, mean: float, over: float, gpu_over: float, status: str) -> None:
    name = "Torch.matmul.0.forward.output.0"
    npu = {"API Name": name, "DEVICE Dtype": dtype, "ULP误差平均值": mean, "ULP误差大于阈值占比": over}
    gpu = {**npu, "ULP误差大于阈值占比": gpu_over}
    rows, _ = _judge(tmp_path, [npu], [gpu])
    assert rows[name].standard == "ulp" and rows[name].status == status
    assert rows[name].cells["ULP误差大于阈值占比比值"] == pytest.approx(over / gpu_over if gpu_over else math.inf)


@pytest.mark.parametrize("name, numbers, standard, status", [
    ("Tensor.__mul__.0.forward.output.0", {"inf/nan错误率": 0, "相对误差错误率": 0, "绝对误差错误率": 0},
     "absolute_threshold", "pass"),
    ("Tensor.__mul__.0.forward.output.0", {"inf/nan错误率": 0, "相对误差错误率": 0.01, "绝对误差错误率": 0},
     "absolute_threshold", "error"),
    ("Tensor.reshape.0.forward.output.0", {"二进制一致错误率": 0.0}, "binary_consistency", "pass"),
    ("Tensor.reshape.0.forward.output.0", {"二进制一致错误率": 0.25}, "binary_consistency", "error"),
    ("Functional.conv2d.0.forward.output.0", {"双千指标": 0.9995}, "thousandth", "pass"),
    ("Functional.conv2d.0.forward.output.0", {"双千指标": 0.998}, "thousandth", "error"),
])
def test_npu_only_standards(tmp_path: Path, name: str, numbers: dict, standard: str, status: str) -> None:
    npu = {"API Name": name, "DEVICE Dtype": "torch.float16", **numbers}
    rows, _ = _judge(tmp_path, [npu], [npu])
    assert (rows[name].standard, rows[name].status) == (standard, status)


def test_integer_output_is_binary_and_float64_is_skipped(tmp_path: Path) -> None:
    a = {"API Name": "Torch.argmax.0.forward.output.0", "DEVICE Dtype": "torch.int64", "二进制一致错误率": 0.5}
    b = _benchmark("Torch.sum.0.forward.output.0", "torch.float64")
    rows, _ = _judge(tmp_path, [a, b], [a, b])
    assert (rows[a["API Name"]].standard, rows[a["API Name"]].status) == ("binary_consistency", "error")
    assert rows[b["API Name"]].status == "SKIP" and "float64" in rows[b["API Name"]].message


def test_result_per_api_and_missing_gpu_rows(tmp_path: Path) -> None:
    fwd, bwd = "Functional.gelu.0.forward.output.0", "Functional.gelu.0.backward.output.0"
    other = "Torch.softmax.0.forward.output.0"
    skipped = {"API Name": "Torch.softmax.0.backward.output.0", "Message": "no gradient"}
    npu = [_benchmark(fwd), _benchmark(bwd, 均方根误差=5e-3), _benchmark(other), skipped]
    rows, result = _judge(tmp_path, npu, [_benchmark(fwd), _benchmark(bwd)])
    assert rows[other].status == "SKIP" and "GPU" in rows[other].message
    assert rows[skipped["API Name"]].status == "SKIP" and rows[skipped["API Name"]].message == "no gradient"
    apis = {r["API Name"]: r for r in _rows(result.result_csv)}
    assert (apis["Functional.gelu.0"]["Forward Test Success"], apis["Functional.gelu.0"]["Backward Test Success"]) \
        == ("pass", "error")
    assert (apis["Torch.softmax.0"]["Forward Test Success"], apis["Torch.softmax.0"]["Backward Test Success"]) \
        == ("SKIP", "SKIP")
    header = result.details_csv.read_bytes().split(b"\r\n")[0]
    assert header.startswith(b"\xef\xbb\xbf") and len(COMPARE_DETAIL_COLUMNS) == 28
    assert list(_rows(result.details_csv)[0]) == list(COMPARE_DETAIL_COLUMNS)


# --- msprobe 1.1.1's CSVs ---------------------------------------------------------------------------


def test_reads_msprobe_111_details(tmp_path: Path) -> None:
    npu = next((DATA / "npu").glob("accuracy_checking_details_*.csv"))
    gpu = next((DATA / "gpu").glob("accuracy_checking_details_*.csv"))
    assert set(REQUIRED_COLUMNS) <= set(_rows(npu)[0])
    assert cli.main(["-f", "pytorch", "api_precision_compare", "-npu", str(npu), "-gpu", str(gpu),
                     "-o", str(tmp_path)]) == 0
    result = next(tmp_path.glob("api_precision_compare_result_*.csv"))
    apis = {r["API Name"]: (r["Forward Test Success"], r["Backward Test Success"]) for r in _rows(result)}
    assert apis == {  # gelu's NPU output is 1 % off (see tests/data/README.md); the rest is correct;
        # no backward: ' ', as 1.1.1's result CSV (tests/data/run_ut_111/npu/accuracy_checking_result_*.csv)
        "Functional.gelu.0": ("error", "error"), "Torch.matmul.0": ("pass", " "),
        "Tensor.__mul__.0": ("pass", " "), "Torch.argmax.0": ("pass", " "),
        "Functional.conv2d.0": ("pass", " "), "Torch.softmax.0": ("pass", "pass"),
        "Functional.layer_norm.0": ("pass", " "),
    }
    theirs = {r["API name"]: r["Backward Test Success"] for r in _rows(next((DATA / "npu").glob("accuracy_*result*")))}
    assert {name for name, cell in theirs.items() if cell == " "} == {name for name, (_, cell) in apis.items()
                                                                      if cell == " "}
    algorithms = {r["API Name"]: r["比对算法"] for r in _rows(next(tmp_path.glob("api_precision_compare_details_*")))}
    assert algorithms["Torch.matmul.0.forward.output.0"] == "ULP误差比对法"
    assert algorithms["Tensor.__mul__.0.forward.output.0"] == "绝对阈值法"
    assert algorithms["Torch.argmax.0.forward.output.0"] == "二进制一致法"
    assert algorithms["Functional.conv2d.0.forward.output.0"] == "双千指标法"
    assert algorithms["Functional.gelu.0.backward.output.0"] == "标杆比对法"


def test_command_under_mindspore_too(tmp_path: Path) -> None:
    npu = next((DATA / "npu").glob("accuracy_checking_details_*.csv"))
    assert cli.main(["-f", "mindspore", "api_precision_compare", "-npu", str(npu), "-gpu", str(npu),
                     "-o", str(tmp_path)]) == 0


def test_nothing_compared_exits_1(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    npu = _details(tmp_path / "npu.csv", [_benchmark("Functional.gelu.0.forward.output.0")])
    gpu = _details(tmp_path / "gpu.csv", [_benchmark("Functional.relu.0.forward.output.0")])
    assert cli.main(["api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(tmp_path)]) == 1
    assert "no output was compared" in caplog.text and "not in the GPU details CSV" in caplog.text


def test_bad_input_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gpu = _details(tmp_path / "gpu.csv", [])
    assert cli.main(["api_precision_compare", "-npu", str(tmp_path / "none.csv"), "-gpu", str(gpu)]) == 2
    assert "no such file" in caplog.text
    result = next((DATA / "npu").glob("accuracy_checking_result_*.csv"))  # a result CSV, not details
    assert cli.main(["api_precision_compare", "-npu", str(result), "-gpu", str(gpu), "-o", str(tmp_path)]) == 2
    assert "missing column(s)" in caplog.text and "小值域错误占比" in caplog.text
