"""msprobe 1.1.1's own bf16-vs-fp32 dumps (copied from shared/reference-outputs) through our compare."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openpyxl
import pytest
import torch

from msprobe.pytorch.compare import compare, load_pt, read_plain_pt

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


SAVED = {
    "bf16 view": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)[1:, ::2] * 1.37,
    "transposed": torch.randn(3, 4).t(), "float16": torch.randn(7).half(), "float64": torch.randn(4).double(),
    "int64": torch.arange(-5, 5), "int8": torch.tensor([-3, 4], dtype=torch.int8), "bool": torch.tensor([True, False]),
    "complex": torch.randn(3, dtype=torch.complex64), "empty": torch.ones(0, 3), "0-dim": torch.tensor(3.5),
    "parameter": torch.nn.Parameter(torch.randn(2, 2)),
}


@pytest.mark.parametrize("name", SAVED)
def test_plain_reader_equals_torch_load(name, tmp_path):
    path = tmp_path / "t.pt"
    torch.save(SAVED[name], path)
    want = torch.load(path, weights_only=True).detach()
    want = (want.float() if want.dtype == torch.bfloat16 else want).numpy()
    got = read_plain_pt(path)
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    assert np.array_equal(load_pt(path), want)


def test_loader_upcasts_bf16_and_refuses_non_tensors(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.tensor([1.5, -2.0], dtype=torch.bfloat16), path)
    array = load_pt(path)
    assert array.dtype == np.float32 and array.tolist() == [1.5, -2.0]
    torch.save({"a": torch.ones(1)}, path)
    with pytest.raises(TypeError, match="not a tensor"):
        load_pt(path)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def dump_step(root: Path, autocast: bool) -> Path:
    """One training step dumped by our PrecisionDebugger (task tensor, level mix), in fp32 or under bf16 autocast.
    Inputs of magnitude ~1000 make bf16's rounding (8 units at 1024) exceed MaxAbsErr 1 at the first conv."""
    from msprobe.core.debugger import BaseDebugger
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    net = ConvNet()
    x = torch.randn(3, 2, 8, 8) * 1000
    debugger = PrecisionDebugger(dump_path=str(root), task="tensor", level="mix", step=[0])
    debugger.start(net)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = torch.nn.functional.cross_entropy(net(x), torch.tensor([0, 3, 1]))
    loss.backward()
    debugger.stop()
    debugger.step()
    if BaseDebugger._active is not None:
        BaseDebugger._active.finish()
    return root / "step0" / "rank" / "dump.json"


def test_our_own_autocast_dumps_match_row_for_row_and_name_the_first_conv(tmp_path, msprobe_log):
    bench, npu = dump_step(tmp_path / "fp32", False), dump_step(tmp_path / "bf16", True)
    assert "\n" in npu.read_text().strip()  # one entry per line: still one JSON document
    result = compare({"npu_path": str(npu), "bench_path": str(bench)}, tmp_path / "out", workers=1)
    matched = [r for r in result.results if r.npu and r.bench and r.npu.name == r.bench.name]
    assert len(result.results) >= 50 and len(matched) == len(result.results)
    names = {r.npu.name for r in matched}
    assert {"Module.conv.Conv2d.forward.0.output.0", "Functional.conv2d.0.backward.output.1"} <= names
    found = result.first_divergence
    assert found.entry == "Functional.conv2d.0.forward" and found.inputs_pass
    conv_out = found.failing_rows[0]
    assert conv_out.npu.value["dtype"] == "torch.bfloat16" and conv_out.bench.value["dtype"] == "torch.float32"
    n, b = (torch.load(path.parent / "dump_tensor_data" / "Functional.conv2d.0.forward.output.0.pt",
                       weights_only=True).double() for path in (npu, bench))
    assert conv_out.tensor.max_abs_err == (n - b).abs().max().item() > 1
    assert conv_out.verdict == "No"
    assert any("test_compare_pytorch.py" in frame for frame in found.stack)
    warning = next(m for m in msprobe_log.messages if m.startswith("first divergence:"))
    assert "test_compare_pytorch.py" in warning  # the user's frame, not torch's conv.py


def test_plain_reader_refuses_a_view_past_its_storage(tmp_path):
    """A crafted file whose view reaches beyond its storage must not be read out of bounds."""
    import importlib

    import numpy as np
    import torch

    pt_compare = importlib.import_module("msprobe.pytorch.compare")  # the module, not the function
    good = tmp_path / "good.pt"
    torch.save(torch.arange(4, dtype=torch.float32), good)
    assert pt_compare.read_plain_pt(good).tolist() == [0.0, 1.0, 2.0, 3.0]
    storage = (np.arange(4, dtype=np.float32), False)
    assert pt_compare._rebuild_tensor(storage, 1, (3,), (1,)).tolist() == [1.0, 2.0, 3.0]
    for offset, size, stride in ((0, (1024,), (1,)), (2, (3,), (1,)), (0, (2, 2), (4, 1)), (0, (2,), (-1,))):
        with pytest.raises(pt_compare._NotPlain):
            pt_compare._rebuild_tensor(storage, offset, size, stride)
