"""msprobe 1.1.1's own bf16-vs-fp32 dumps (copied from shared/reference-outputs) through our compare."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openpyxl
import pytest
import torch
from torch_models import dump_one_step

from msprobe.core.compare.read.ptfile import read_plain_pt
from msprobe.core.compare.read.tensorfile import TensorFileError, TensorSpec
from msprobe.pytorch.compare import compare
from msprobe.pytorch.tensor_files import load_pt

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


def dump_step(root: Path, autocast: bool, fault: bool = False) -> Path:
    """One training step dumped by our PrecisionDebugger (task tensor, level mix), in fp32 or under bf16 autocast;
    ``fault`` scales the conv weight by 1.05, five times what bf16 rounding explains (slack 8 · 2^-8 ≈ 3%)."""
    torch.manual_seed(0)
    net = ConvNet()
    x = torch.randn(3, 2, 8, 8) * 1000
    directory = dump_one_step(net, lambda m: torch.nn.functional.cross_entropy(m(x), torch.tensor([0, 3, 1])), root,
                              task="tensor", level="mix", autocast=torch.bfloat16 if autocast else None,
                              fault="conv" if fault else None)
    return directory / "dump.json"


def test_our_own_autocast_dumps_match_row_for_row_and_name_the_faulted_conv(tmp_path, msprobe_log):
    bench, npu = dump_step(tmp_path / "fp32", False), dump_step(tmp_path / "bf16", True)
    assert "\n" in npu.read_text().strip()  # one entry per line: still one JSON document
    clean = compare({"npu_path": str(npu), "bench_path": str(bench)}, tmp_path / "clean", workers=1)
    matched = [r for r in clean.results if r.npu and r.bench and r.npu.name == r.bench.name]
    assert len(clean.results) >= 50 and len(matched) == len(clean.results)
    names = {r.npu.name for r in matched}
    assert {"Module.conv.Conv2d.forward.0.output.0", "Functional.conv2d.0.backward.output.1"} <= names
    conv_out = next(r for r in clean.results if r.npu.name == "Functional.conv2d.0.forward.output.0")
    assert conv_out.verdict == "No"  # inputs of magnitude 1000: MaxAbsErr > 1 fails 1.1.1's verdict...
    assert clean.first_divergence is None  # ...but it is bf16 rounding, and no row is named for it

    faulted = dump_step(tmp_path / "bf16_fault", True, fault=True)
    result = compare({"npu_path": str(faulted), "bench_path": str(bench)}, tmp_path / "out", workers=1)
    found = result.first_divergence
    assert found.entry == "Functional.conv2d.0.forward" and found.inputs_pass  # the weight is the first change
    conv_out = found.failing_rows[0]
    assert conv_out.npu.value["dtype"] == "torch.bfloat16" and conv_out.bench.value["dtype"] == "torch.float32"
    n, b = (torch.load(path.parent / "dump_tensor_data" / "Functional.conv2d.0.forward.output.0.pt",
                       weights_only=True).double() for path in (faulted, bench))
    assert conv_out.tensor.max_abs_err == (n - b).abs().max().item()
    assert conv_out.excess == pytest.approx((n - b).norm().item() / (8 * 2**-8 * max(n.norm(), b.norm()).item()))
    assert conv_out.excess > 1
    assert any("test_compare_pytorch.py" in frame for frame in found.stack)
    warning = next(m for m in msprobe_log.messages if m.startswith("first divergence: Functional.conv2d.0.forward"))
    assert "test_compare_pytorch.py" in warning  # the user's frame, not torch's conv.py


def _save_view(path: Path, offset: int, size: tuple, stride: tuple) -> None:
    """torch.save's archive of a float32 storage of 4 elements, its data.pkl describing the view
    ``offset``/``size``/``stride`` of it (what a crafted file could claim)."""
    import collections
    import io
    import pickle
    import zipfile

    storage = object()

    class View:
        def __reduce__(self):
            return torch._utils._rebuild_tensor_v2, (storage, offset, size, stride, False, collections.OrderedDict())

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", torch.FloatStorage, "0", "cpu", 4) if obj is storage else None

    genuine = io.BytesIO()
    torch.save(torch.arange(4, dtype=torch.float32), genuine)
    data = io.BytesIO()
    Pickler(data, protocol=2).dump(View())
    with zipfile.ZipFile(genuine) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as crafted:
        for name in source.namelist():
            crafted.writestr(name, data.getvalue() if name.endswith("/data.pkl") else source.read(name))


def test_plain_reader_refuses_a_view_past_its_storage(tmp_path):
    """A crafted file whose view reaches beyond its storage must not be read out of bounds."""
    path = tmp_path / "view.pt"
    _save_view(path, 1, (3,), (1,))
    assert read_plain_pt(path).tolist() == load_pt(path).tolist() == [1.0, 2.0, 3.0]
    for offset, size, stride in ((0, (1024,), (1,)), (2, (3,), (1,)), (0, (2, 2), (4, 1)), (0, (2,), (-1,))):
        _save_view(path, offset, size, stride)
        with pytest.raises(TensorFileError):
            load_pt(path)


def test_a_small_file_cannot_claim_a_huge_tensor(tmp_path):
    """torch.save of an expanded tensor stores one element behind a stride-0 view of any shape: expanding it
    would allocate the whole shape. The reader checks dump.json's shape and the stored elements first."""
    import tracemalloc

    path = tmp_path / "expanded.pt"
    torch.save(torch.zeros(1).expand(4000, 4000), path)
    assert path.stat().st_size < 4000
    spec = TensorSpec((4000, 4000), "torch.float32")
    tracemalloc.start()
    try:
        with pytest.raises(TensorFileError, match="needs 16000000 elements but the file stores 1"):
            load_pt(path, spec)
        with pytest.raises(TensorFileError, match=r"shape \[4000, 4000\] but dump.json records \[3\]"):
            load_pt(path, TensorSpec((3,), "torch.float32"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the 64 MB the view describes were never allocated
    torch.save(torch.ones(3, dtype=torch.float64), path)
    with pytest.raises(TensorFileError, match="holds double data but dump.json records dtype torch.float32"):
        load_pt(path, TensorSpec((3,), "torch.float32"))
    torch.save(torch.ones(3, dtype=torch.bfloat16), path)
    assert load_pt(path, TensorSpec((3,), "torch.bfloat16")).tolist() == [1.0, 1.0, 1.0]


def test_rows_that_cannot_be_compared_are_counted_and_set_the_exit_code(tmp_path, msprobe_log):
    """A missing tensor file and a 2 KB stride-0 file claiming a conv output's shape: the comparison finishes,
    names both files on their rows, says how many rows it could not compare, and exits with 1."""
    import json
    import shutil

    from msprobe.core import cli

    bench = dump_step(tmp_path / "fp32", False)
    shutil.copytree(tmp_path / "fp32", tmp_path / "npu")
    npu = tmp_path / "npu" / bench.relative_to(tmp_path / "fp32")
    config = tmp_path / "compare.json"
    config.write_text(json.dumps({"npu_path": str(npu), "bench_path": str(bench)}))
    assert cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(tmp_path / "same")]) == 0
    tensors = npu.parent / "dump_tensor_data"
    (tensors / "Torch.relu.0.forward.output.0.pt").unlink()
    conv_out = tensors / "Functional.conv2d.0.forward.output.0.pt"
    shape = torch.load(conv_out, weights_only=True).shape
    conv_out.unlink()  # the dumper may hard-link a repeated tensor: write a new file, not through the link
    torch.save(torch.zeros(1).expand(shape), conv_out)
    assert conv_out.stat().st_size < 2048
    assert cli.main(["-f", "pytorch", "compare", "-i", str(config), "-o", str(tmp_path / "out")]) == 1
    result = compare({"npu_path": str(npu), "bench_path": str(bench)}, tmp_path / "api", workers=1)
    broken = {r.npu.name: " ".join(r.messages) for r in result.results if r.not_compared}
    assert "not found" in broken["Torch.relu.0.forward.output.0"]
    assert f"needs {shape.numel()} elements but the file stores 1" in broken["Functional.conv2d.0.forward.output.0"]
    assert result.not_compared == len(broken) >= 2
    assert f"{len(broken)} rows could not be compared" in msprobe_log.text()
    [page] = (tmp_path / "api").glob("*.html")
    assert f"{len(broken)} rows could not be compared:" in page.read_text()
