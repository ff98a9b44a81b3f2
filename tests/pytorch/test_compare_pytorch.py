"""msprobe 1.1.1's own bf16-vs-fp32 dumps (copied from shared/reference-outputs) through our compare."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openpyxl
import pytest
import torch

from msprobe.pytorch.compare import compare, load_pt

REF = Path(__file__).parent / "data" / "compare_ref"


def dumps(kind: str) -> dict:
    return {"npu_json_path": str(REF / f"pt_{kind}_bf16/step0/rank/dump.json"),
            "bench_json_path": str(REF / f"pt_{kind}_fp32/step0/rank/dump.json"),
            "stack_json_path": str(REF / f"pt_{kind}_bf16/step0/rank/stack.json")}


@pytest.mark.parametrize("kind, mode", [("tensor_L1", "tensor"), ("statistics_mix", "summary"), ("md5_L1", "md5")])
def test_bf16_vs_fp32_rows_all_match_unlike_1_1_1(kind, mode, tmp_path):
    result = compare(dumps(kind), tmp_path, stack_mode=True, workers=1)
    assert result.mode == mode
    unmatched = [r for r in result.results if r.npu is None or r.bench is None]
    assert result.results and not unmatched  # 1.1.1 left most of these rows "No bench data matched."
    sheet = openpyxl.load_workbook(result.reports["xlsx"]).active
    assert sheet.max_row == len(result.results) + 1


def test_tensor_metrics_match_numpy_on_the_saved_tensors(tmp_path):
    result = compare(dumps("tensor_L1"), tmp_path, workers=1)
    checked = 0
    for row in result.results:
        if row.tensor is None or row.tensor.cosine is None:
            continue
        n = torch.load(REF / "pt_tensor_L1_bf16/step0/rank/dump_tensor_data" / row.npu.value["data_name"],
                       weights_only=True).double().numpy().ravel()
        b = torch.load(REF / "pt_tensor_L1_fp32/step0/rank/dump_tensor_data" / row.bench.value["data_name"],
                       weights_only=True).double().numpy().ravel()
        assert row.tensor.cosine == pytest.approx(n @ b / np.linalg.norm(n) / np.linalg.norm(b), rel=1e-12)
        assert row.tensor.max_abs_err == pytest.approx(np.abs(n - b).max(), rel=1e-12, abs=0)
        checked += 1
    assert checked >= 10
    relu = [r for r in result.results if r.npu and r.npu.name == "Functional.relu.0.forward.output.0"][0]
    assert relu.npu.value["dtype"] == "torch.bfloat16" and relu.bench.value["dtype"] == "torch.float32"
    assert relu.verdict == "Yes"


def test_relative_dump_data_dir_falls_back_next_to_dump_json(tmp_path):
    for side in ("bf16", "fp32"):
        shutil.copytree(REF / f"pt_tensor_L1_{side}", tmp_path / side)
    result = compare({"npu_path": str(tmp_path / "bf16/step0/rank/dump.json"),
                      "bench_path": str(tmp_path / "fp32/step0/rank/dump.json")}, tmp_path / "out", workers=1)
    assert not [r for r in result.results if "not found" in " ".join(r.messages)]


def test_loader_upcasts_bf16_and_refuses_non_tensors(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.tensor([1.5, -2.0], dtype=torch.bfloat16), path)
    array = load_pt(path)
    assert array.dtype == np.float32 and array.tolist() == [1.5, -2.0]
    torch.save({"a": torch.ones(1)}, path)
    with pytest.raises(TypeError, match="not a tensor"):
        load_pt(path)
