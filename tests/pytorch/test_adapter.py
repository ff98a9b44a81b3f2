"""TorchTensorAdapter: statistics against float64 numpy, checksums against zlib, files, encodings."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from msprobe.core.records import NOT_HANDLED
from msprobe.core.tensor_writer import TensorWriter
from msprobe.pytorch.adapter import TorchTensorAdapter

adapter = TorchTensorAdapter()


def _stats(t: torch.Tensor):
    return adapter.fetch([adapter.stats(t)])[0]


def _reference(values: np.ndarray) -> tuple[float, float, float, float]:
    v = values.astype(np.float64).ravel()
    return v.max(), v.min(), v.mean(), math.sqrt((v * v).sum())


@pytest.mark.parametrize(
    "dtype, rel",
    [(torch.float32, 1e-6), (torch.float16, 1e-6), (torch.bfloat16, 1e-6), (torch.float64, 1e-12)],
)
def test_float_statistics_match_float64_numpy(dtype, rel):
    torch.manual_seed(3)
    t = (torch.randn(64, 33) * 7).to(dtype)
    exact = _reference(t.to(torch.float64).numpy())
    got = _stats(t)
    for value, want in zip((got.max, got.min, got.mean, got.norm), exact):
        assert value == pytest.approx(want, rel=rel, abs=1e-6)
    assert got.max_except_inf_nan is None and got.min_except_inf_nan is None


def test_float32_matches_what_1_1_1_wrote():
    # reference-outputs/pytorch/pt_statistics_L1_fp32: input of Functional.conv2d.0.forward
    # (extremes exactly; mean and norm to float32 rounding: the summation order differs from torch.mean)
    torch.manual_seed(1)
    got = _stats(torch.randn(2, 1, 4, 4))
    assert (got.max, got.min) == (1.6871134042739868, -2.2455577850341797)
    assert got.mean == pytest.approx(-0.34596797823905945, rel=1e-6)
    assert got.norm == pytest.approx(5.287123203277588, rel=1e-6)


def test_fp16_norm_does_not_overflow():
    t = torch.full((1000,), 60000.0, dtype=torch.float16)
    got = _stats(t)
    assert got.norm == pytest.approx(60000.0 * math.sqrt(1000), rel=1e-6)
    assert math.isfinite(got.mean)


def test_int64_reduced_in_float64():
    t = torch.tensor([2**53 + 1, 3, -5], dtype=torch.int64)
    got = _stats(t)
    values = np.array([2**53 + 1, 3, -5], dtype=np.float64)
    assert got.max == values.max() and got.min == -5.0
    assert got.mean == pytest.approx(values.mean(), rel=1e-15)
    assert got.norm == pytest.approx(np.linalg.norm(values), rel=1e-15)


def test_bool_is_any_all():
    got = _stats(torch.tensor([True, False, True]))
    assert (got.max, got.min, got.mean, got.norm) == (True, False, None, None)
    got = _stats(torch.tensor([True, True]))
    assert (got.max, got.min) == (True, True)


def test_complex_over_absolute_value():
    t = torch.tensor([3 + 4j, 1 - 1j, -2j], dtype=torch.complex64)
    exact = _reference(np.abs(t.numpy()))
    got = _stats(t)
    for value, want in zip((got.max, got.min, got.mean, got.norm), exact):
        assert value == pytest.approx(want, rel=1e-6)


def test_empty_and_zero_dim():
    assert _stats(torch.empty(0, 3)).max is None
    got = _stats(torch.tensor(2.5))
    assert (got.max, got.min, got.mean, got.norm) == (2.5, 2.5, 2.5, 2.5)


def test_non_finite_values_give_finite_extremes():
    got = _stats(torch.tensor([1.0, float("inf"), -3.0, float("nan")]))
    assert math.isnan(got.max) or got.max == math.inf
    assert got.max_except_inf_nan == 1.0 and got.min_except_inf_nan == -3.0
    got = _stats(torch.tensor([float("inf"), -float("inf")]))
    assert (got.max, got.min) == (math.inf, -math.inf)
    assert got.max_except_inf_nan is None and got.min_except_inf_nan is None


def test_fetch_many_handles_in_order():
    tensors = [torch.tensor([1.0, 2.0]), torch.empty(0), torch.tensor([True]), torch.tensor([-4, 4])]
    got = adapter.fetch([adapter.stats(t) for t in tensors])
    assert [s.max for s in got] == [2.0, None, True, 4.0]
    assert [s.mean for s in got] == [1.5, None, None, 0.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_checksum_is_crc32_of_the_bytes(dtype):
    t = (torch.arange(24) % 5).to(dtype).reshape(4, 6).t()  # non-contiguous on purpose
    want = f"{zlib.crc32(np.ascontiguousarray(t.numpy()).tobytes()):08x}"
    assert adapter.checksum(t) == want


def test_checksum_of_bfloat16_uses_its_bytes():
    t = torch.tensor([1.0, -2.5, 3.25], dtype=torch.bfloat16)
    raw = t.view(torch.int16).numpy().tobytes()
    assert adapter.checksum(t) == f"{zlib.crc32(raw):08x}"
    assert len(adapter.checksum(t)) == 8


def test_snapshot_is_not_reached_by_inplace_changes():
    t = torch.ones(3, requires_grad=True)
    snap = adapter.snapshot(t)
    with torch.no_grad():
        t.add_(1)
    assert snap.tolist() == [1.0, 1.0, 1.0] and not snap.requires_grad


def test_save_writes_contiguous_cpu_tensor_loadable_with_weights_only(tmp_path):
    t = torch.arange(12.0, requires_grad=True).reshape(3, 4).t()
    path = tmp_path / "x.pt"
    writer = TensorWriter(adapter)
    writer.save(t, path)
    writer.drain()
    loaded = torch.load(path, weights_only=True)
    assert loaded.is_contiguous() and not loaded.requires_grad
    assert torch.equal(loaded, t.detach())


def test_describe_and_encode_other():
    record = adapter.describe(torch.zeros(2, 3, dtype=torch.float16, requires_grad=True))
    assert (record.dtype, record.shape, record.requires_grad) == ("torch.float16", (2, 3), True)
    assert adapter.encode_other(torch.float16) == {"type": "torch.dtype", "value": "torch.float16"}
    assert adapter.encode_other(torch.device("cpu")) == {"type": "torch.device", "value": "cpu"}
    assert adapter.encode_other(torch.Size([2, 3])) == [{"type": "int", "value": 2}, {"type": "int", "value": 3}]
    assert adapter.encode_other(object()) is NOT_HANDLED
    assert adapter.is_tensor(torch.zeros(1)) and not adapter.is_tensor(1.0)


@pytest.mark.parametrize("values", [
    torch.tensor([[1.5, -2.0, 3.25], [0.5, 7.0, -1.0]]),
    torch.tensor([1.0, float("inf"), -3.0, float("nan")]),
    torch.arange(-5, 6, dtype=torch.int32),
    torch.randn(20000),  # above the numpy threshold: torch's single-pass host reduction
], ids=["float32", "non-finite", "int32", "large"])
def test_device_path_agrees_with_the_host_path(values):
    """On CPU the adapter computes with numpy (small tensors with their batch); the accelerator path
    (launch, then one fetch) runs here too."""
    from msprobe.pytorch.adapter import StatsHandle, TorchTensorAdapter, _float_stats

    adapter = TorchTensorAdapter()
    [host, device] = adapter.fetch([adapter.stats(values), StatsHandle(_float_stats(values))])
    for field in ("max", "min", "mean", "norm", "max_except_inf_nan", "min_except_inf_nan"):
        a, b = getattr(host, field), getattr(device, field)
        if a is None or b is None:
            assert a == b, field
        else:
            assert a == pytest.approx(b, rel=1e-5, nan_ok=True), field
