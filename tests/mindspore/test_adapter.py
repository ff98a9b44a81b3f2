"""MindSporeTensorAdapter: statistics checked against float64 numpy, files, checksums, encoding."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")

from msprobe.core.records import NOT_HANDLED  # noqa: E402
from msprobe.core.tensor_writer import TensorWriter  # noqa: E402
from msprobe.mindspore.adapter import MindSporeTensorAdapter  # noqa: E402

ADAPTER = MindSporeTensorAdapter()
RNG = np.random.default_rng(7)


def numpy_stats(values: np.ndarray, accumulate: type) -> list:
    x = values.astype(accumulate).ravel()
    finite = x[np.isfinite(x)]
    return [float(x.max()), float(x.min()), float(x.mean(dtype=accumulate)),
            float(np.sqrt(np.sum(x * x, dtype=accumulate))),
            float(finite.max()) if finite.size else None, float(finite.min()) if finite.size else None]


CASES = [
    ("float32", RNG.standard_normal((3, 5)).astype(np.float32), np.float32),
    ("float64", RNG.standard_normal(50) * 1e10, np.float64),
    ("int32", RNG.integers(-1000, 1000, 40).astype(np.int32), np.float64),
    ("int64 beyond float32", np.array([2**40 + 1, -(2**40) - 3, 7], np.int64), np.float64),
    ("uint8", np.array([0, 255, 3], np.uint8), np.float64),
    ("float16 big", np.full(100, 60000, np.float16), np.float32),
    ("float32 inf nan", np.array([1.0, np.inf, -2.0, np.nan, -np.inf], np.float32), np.float32),
    ("float32 only inf", np.array([np.inf, -np.inf], np.float32), np.float32),
]


@pytest.mark.parametrize("label,values,accumulate", CASES, ids=[c[0] for c in CASES])
def test_stats_match_numpy(label, values, accumulate):
    (stats,) = ADAPTER.fetch([ADAPTER.stats(ms.Tensor(values))])
    big, small, mean, norm, finite_big, finite_small = numpy_stats(values, accumulate)
    got = [stats.max, stats.min, stats.mean, stats.norm]
    np.testing.assert_allclose(got, [big, small, mean, norm], rtol=1e-6, equal_nan=True)
    assert stats.max_except_inf_nan == (None if math.isfinite(big) else finite_big)
    assert stats.min_except_inf_nan == (None if math.isfinite(small) else finite_small)
    assert stats.is_finite() == bool(np.isfinite([big, small, mean, norm]).all())


def test_integer_and_float64_stats_are_exact():
    values = np.array([2**40 + 1, 3, -(2**41) + 5], np.int64)
    (stats,) = ADAPTER.fetch([ADAPTER.stats(ms.Tensor(values))])
    assert stats.max == float(2**40 + 1) and stats.min == float(-(2**41) + 5)
    assert stats.mean == values.astype(np.float64).mean()


def test_bfloat16_accumulates_in_float32():
    values = np.array([1.5, 2.5, 300.0, -4.0], np.float32)  # exactly representable in bfloat16
    tensor = ms.Tensor(values).astype(ms.bfloat16)
    (stats,) = ADAPTER.fetch([ADAPTER.stats(tensor)])
    assert [stats.max, stats.min, stats.mean] == [300.0, -4.0, values.mean()]
    assert stats.norm == pytest.approx(float(np.linalg.norm(values.astype(np.float64))), rel=1e-6)
    assert ADAPTER.describe(tensor).dtype == "BFloat16"


def test_bool_empty_and_batched_fetch_keep_order():
    handles = [ADAPTER.stats(ms.Tensor(np.array([True, False]))),
               ADAPTER.stats(ms.Tensor(np.zeros((0, 3), np.float32))),
               ADAPTER.stats(ms.Tensor(np.array([True, True]))),
               ADAPTER.stats(ms.Tensor(np.array([5.0], np.float32)))]
    bool_mixed, empty, bool_all, five = ADAPTER.fetch(handles)
    assert (bool_mixed.max, bool_mixed.min, bool_mixed.mean, bool_mixed.norm) == (True, False, None, None)
    assert (bool_all.max, bool_all.min) == (True, True)
    assert (empty.max, empty.min, empty.mean, empty.norm) == (None, None, None, None)
    assert (five.max, five.min, five.mean, five.norm) == (5.0, 5.0, 5.0, 5.0)
    assert ADAPTER.fetch([]) == []


def test_describe_has_mindspore_dtype_and_no_requires_grad():
    record = ADAPTER.describe(ms.Tensor(np.zeros((2, 8), np.float32)))
    assert (record.type_name, record.dtype, record.shape, record.requires_grad) == \
        ("mindspore.Tensor", "Float32", (2, 8), None)
    assert ADAPTER.describe(ms.Tensor(np.zeros(3, np.int64))).dtype == "Int64"
    assert ADAPTER.is_tensor(ms.Tensor(1.0)) and not ADAPTER.is_tensor(np.ones(1))


def test_checksum_is_crc32_of_the_bytes():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert ADAPTER.checksum(ms.Tensor(values)) == f"{zlib.crc32(values.tobytes()):08x}"
    bf16 = ms.Tensor(np.array([1.5, 2.5], np.float32)).astype(ms.bfloat16)
    assert ADAPTER.checksum(bf16) == f"{zlib.crc32(bytes.fromhex('c03f2040')):08x}"


def test_snapshot_is_not_reached_by_inplace_changes():
    tensor = ms.Tensor(np.ones(3, np.float32))
    copy = ADAPTER.snapshot(tensor)
    tensor[0] = 5.0
    np.testing.assert_array_equal(copy.asnumpy(), np.ones(3, np.float32))


def test_save_writes_npy_and_bfloat16_as_float32(tmp_path):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    writer = TensorWriter(ADAPTER)
    writer.save(ms.Tensor(values), tmp_path / "a.npy")
    writer.save(ms.Tensor(values).astype(ms.bfloat16), tmp_path / "b.npy")
    writer.drain()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), values)
    loaded = np.load(tmp_path / "b.npy")
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, values)


def test_encode_other():
    assert ADAPTER.encode_other(ms.float16) == {"type": "mindspore.dtype", "value": "Float16"}
    assert ADAPTER.encode_other(object()) is NOT_HANDLED


@pytest.mark.parametrize("values", [
    np.array([[1.5, -2.0, 3.25], [0.5, 7.0, -1.0]], np.float32),
    np.array([1.0, np.inf, -3.0, np.nan], np.float32),
    np.arange(-5, 6, dtype=np.int32),
    np.array([True, False]),
], ids=["float32", "non-finite", "int32", "bool"])
def test_device_path_agrees_with_the_host_path(values):
    """On CPU the adapter reduces with numpy; the MindSpore-op path used on GPU/Ascend runs here too."""
    from msprobe.mindspore.adapter import MindSporeTensorAdapter, device_stats

    adapter = MindSporeTensorAdapter()
    [host, device] = adapter.fetch([adapter.stats(ms.Tensor(values)), device_stats(ms.Tensor(values))])
    for field in ("max", "min", "mean", "norm", "max_except_inf_nan", "min_except_inf_nan"):
        a, b = getattr(host, field), getattr(device, field)
        if a is None or b is None or isinstance(a, bool):
            assert a == b, field
        else:
            assert a == pytest.approx(b, rel=1e-6, nan_ok=True), field
