"""The ``TensorAdapter`` contract (``msprobe.core.contract``), stated once for every framework's adapter
(``side`` in conftest.py): statistics of every dtype against float64 numpy on the host path and on the
accelerator path, a mixed batch fetched in order, checksums against zlib, snapshots, tensor files,
descriptions and encodings."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from stats_reference import reference_xor

from msprobe.core.contract import NOT_HANDLED
from msprobe.core.dump.tensor_writer import TensorWriter
from msprobe.core.dump.xor_checksum import resolve_checksums
from msprobe.core.lifecycle.rows import RowSelection, RowSlice

RNG = np.random.default_rng(7)

STATS_CASES = {  # name → (values, dtype of the tensor made of them)
    "float32": (RNG.standard_normal((64, 33)) * 7, "float32"),
    "float16": (RNG.standard_normal((64, 33)) * 7, "float16"),
    "bfloat16": (RNG.standard_normal((64, 33)) * 7, "bfloat16"),
    "float64": (RNG.standard_normal(50) * 1e10, "float64"),
    "int32": (RNG.integers(-1000, 1000, 40), "int32"),
    "int64 beyond float32": (np.array([2**53 + 1, -(2**41) + 5, 3]), "int64"),
    "uint8": (np.array([0, 255, 3]), "uint8"),
    "float16 norm beyond float16": (np.full(1000, 60000.0), "float16"),
    "non-finite": (np.array([1.0, np.inf, -2.0, np.nan, -np.inf]), "float32"),
    "only infinite": (np.array([np.inf, -np.inf]), "float32"),
    "complex64": (np.array([3 + 4j, 1 - 1j, -2j]), "complex64"),
    "zero-dim": (np.array(2.5), "float32"),
    "large float32": (RNG.standard_normal(20000), "float32"),  # past every batched path's size
    "bool": (np.array([True, False, True]), "bool"),
    "bool all": (np.array([True, True]), "bool"),
    "empty": (np.zeros((0, 3)), "float32"),
}
FLOAT32_REDUCED = ("float32", "float16", "bfloat16", "complex64")  # the rest are reduced in float64


def reference(values: np.ndarray) -> dict:
    """The statistics in float64 numpy (what the tensor holds, as the framework reads it back)."""
    if values.size == 0:
        return dict(max=None, min=None, mean=None, norm=None, max_except_inf_nan=None, min_except_inf_nan=None)
    if values.dtype == np.bool_:
        return dict(max=bool(values.any()), min=bool(values.all()), mean=None, norm=None,
                    max_except_inf_nan=None, min_except_inf_nan=None)
    x = (np.abs(values) if values.dtype.kind == "c" else values).astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    with np.errstate(invalid="ignore"):
        high, low, mean, norm = x.max(), x.min(), x.mean(), math.sqrt(np.sum(x * x))
    return dict(max=high, min=low, mean=mean, norm=norm,
                max_except_inf_nan=None if math.isfinite(high) or not finite.size else finite.max(),
                min_except_inf_nan=None if math.isfinite(low) or not finite.size else finite.min())


def assert_stats(got, values: np.ndarray, dtype: str) -> None:
    want = reference(values)
    rel = 1e-6 if dtype in FLOAT32_REDUCED else 1e-12
    scale = float(np.abs(values[np.isfinite(values)]).max(initial=1.0)) if values.dtype != np.bool_ else 1.0
    for field in ("max", "min", "max_except_inf_nan", "min_except_inf_nan"):  # elements: exact
        np.testing.assert_equal(getattr(got, field), want[field], err_msg=field)
    for field in ("mean", "norm"):
        if want[field] is None:
            assert getattr(got, field) is None, field
        else:
            assert getattr(got, field) == pytest.approx(want[field], rel=rel, abs=rel * scale, nan_ok=True), field


@pytest.fixture(params=["host", "device"])
def launch(side, request):
    """How a tensor's statistics start: the host path (CPU tensors) or the accelerator path, which runs
    on the CPU too."""
    if request.param == "host":
        return side.adapter().stats
    if side.DEVICE_PATH is None:
        pytest.skip(f"the {side.NAME} adapter has no accelerator path: its arrays live in host memory")
    return side.DEVICE_PATH


@pytest.mark.parametrize("case", STATS_CASES)
def test_statistics_match_float64_numpy(side, launch, case):
    values, dtype = STATS_CASES[case]
    tensor = side.tensor(values, dtype)
    (got,) = side.adapter().fetch([launch(tensor)])
    assert_stats(got, side.host(tensor), dtype)
    if got.max is not None and dtype != "bool":
        assert got.is_finite() == bool(np.isfinite([got.max, got.min, got.mean, got.norm]).all())


def test_one_fetch_keeps_the_order_of_a_mixed_batch(side):
    """Host and accelerator handles of every kind in one fetch, each answered as if fetched alone."""
    adapter = side.adapter()
    paths = [adapter.stats] if side.DEVICE_PATH is None else [adapter.stats, side.DEVICE_PATH]
    cases = [STATS_CASES[name] for name in ("int32", "empty", "bool", "zero-dim", "non-finite", "float32")]
    tensors = [side.tensor(values, dtype) for values, dtype in cases]
    got = adapter.fetch([launch(t) for launch in paths for t in tensors])
    assert len(got) == len(paths) * len(tensors)
    for i, stats in enumerate(got):
        assert_stats(stats, side.host(tensors[i % len(tensors)]), cases[i % len(tensors)][1])
    assert adapter.fetch([]) == []


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_checksum_is_crc32_of_the_bytes_in_row_major_order(side, dtype):
    values = (np.arange(24) % 5).reshape(6, 4)
    tensor = side.transposed(side.tensor(values, dtype))  # not contiguous, on purpose
    want = f"{zlib.crc32(np.ascontiguousarray(values.astype(dtype).T).tobytes()):08x}"
    assert side.adapter().checksum(tensor) == want


def test_checksum_of_bfloat16_is_over_its_own_two_bytes(side):
    values = np.array([1.0, -2.5, 3.25, 300.0], np.float32)  # exact in bfloat16: its upper 16 bits
    raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    assert side.adapter().checksum(side.tensor(values, "bfloat16")) == f"{zlib.crc32(raw):08x}"


XOR_CASES = {  # name → (values, dtype): widths 1, 2, 4, 8, 16, sizes that leave a partial word or none
    **{name: STATS_CASES[name] for name in ("float32", "float16", "float64", "int32", "uint8", "bool",
                                            "complex64", "zero-dim", "empty", "large float32")},
    "odd bytes": (np.arange(13), "uint8"),
}


@pytest.mark.parametrize("case", list(XOR_CASES))
def test_xor_checksum_is_the_xor_of_the_little_endian_words(side, case):
    values, dtype = XOR_CASES[case]
    tensor = side.tensor(values, dtype)
    want = reference_xor(values.astype(dtype).tobytes())  # tobytes: row-major
    adapter = side.adapter()
    handles = [adapter.xor_checksum(tensor)]
    if side.XOR_DEVICE_PATH is not None:
        handles.append(side.XOR_DEVICE_PATH(tensor))
    assert resolve_checksums(handles, adapter.transfer_words) == [want] * len(handles)


def test_xor_checksum_reads_a_transposed_tensor_in_row_major_order(side):
    values = np.arange(24.0).reshape(6, 4)
    tensor = side.transposed(side.tensor(values, "float32"))
    adapter = side.adapter()
    handles = [adapter.xor_checksum(tensor)] + ([side.XOR_DEVICE_PATH(tensor)] if side.XOR_DEVICE_PATH else [])
    want = reference_xor(np.ascontiguousarray(values.astype(np.float32).T).tobytes())
    assert resolve_checksums(handles, adapter.transfer_words) == [want] * len(handles)


def test_xor_checksum_of_bfloat16_is_over_its_own_two_bytes(side):
    values = np.array([1.0, -2.5, 3.25, 300.0, 7.0], np.float32)  # exact in bfloat16: its upper 16 bits
    raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    adapter = side.adapter()
    (got,) = resolve_checksums([adapter.xor_checksum(side.tensor(values, "bfloat16"))], adapter.transfer_words)
    assert got == reference_xor(raw)


def test_capture_is_describe_and_stats(side):
    adapter = side.adapter()
    tensor = side.tensor(*STATS_CASES["float32"])
    record, handle = adapter.capture(tensor)
    assert record == adapter.describe(tensor)
    assert adapter.fetch([handle]) == adapter.fetch([adapter.stats(tensor)])


def _crc32(values: np.ndarray) -> str:
    return f"{zlib.crc32(values.astype(np.float32).tobytes()):08x}"


def test_what_an_adapter_keeps_never_hides_a_change(side):
    """A call's output (``remember``) is read anew, an input reuses what was kept only while the tensor is
    unchanged as the framework counts changes, and nothing is reused after :meth:`forget` (a new step),
    whatever changed the tensor in between."""
    adapter = side.adapter()
    values = np.arange(6.0) - 2
    tensor = side.tensor(values, "float32")

    def current(remember: bool = False):
        (stats,) = adapter.fetch([adapter.capture(tensor, remember)[1]])
        assert adapter.checksum(tensor, remember) == _crc32(side.host(tensor))
        return stats

    assert_stats(current(remember=True), values, "float32")
    side.change_in_place(tensor)  # counted
    assert_stats(current(), values + [1, 0, 0, 0, 0, 0], "float32")
    side.change_unseen(tensor)  # not counted: read anew as an output
    assert_stats(current(remember=True), values + [2, 0, 0, 0, 0, 0], "float32")
    adapter.forget()
    side.change_unseen(tensor)  # not counted: nothing kept after forget()
    assert_stats(current(), values + [3, 0, 0, 0, 0, 0], "float32")


def test_snapshot_is_not_reached_by_inplace_changes(side):
    values = np.ones(3)
    tensor, _ = side.trainable(side.tensor(values, "float32"))
    snapshot = side.adapter().snapshot(tensor)
    side.change_in_place(tensor)
    assert not np.array_equal(side.host(tensor), values)  # the change happened
    np.testing.assert_array_equal(side.host(snapshot), values)
    assert not getattr(snapshot, "requires_grad", False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_tensor_file_holds_a_contiguous_copy_of_the_values(side, dtype, tmp_path):
    adapter = side.adapter()
    values = np.arange(12.0).reshape(3, 4)
    tensor, _ = side.trainable(side.tensor(values, dtype))
    path = tmp_path / f"x{adapter.tensor_suffix}"
    writer = TensorWriter(adapter)
    writer.save(side.transposed(tensor), path)
    writer.drain()
    array, file_dtype = side.load(path)
    assert array.flags.c_contiguous
    np.testing.assert_array_equal(array, values.T)
    assert file_dtype == side.FILE_DTYPES[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool", "bfloat16"])
def test_describe_names_the_dtype_and_shape(side, dtype):
    adapter = side.adapter()
    record = adapter.describe(side.tensor(np.zeros((2, 3)), dtype))
    assert (record.type_name, record.dtype, record.shape) == (adapter.type_name, side.DTYPE_NAMES[dtype], (2, 3))


def test_describe_records_requires_grad_where_tensors_carry_it(side):
    adapter = side.adapter()
    plain = side.tensor(np.zeros(3), "float32")
    trainable, flag = side.trainable(side.tensor(np.zeros(3), "float32"))
    assert adapter.describe(trainable).requires_grad == flag
    assert adapter.describe(plain).requires_grad == (None if flag is None else False)


def test_is_tensor_and_encode_other(side):
    adapter = side.adapter()
    assert adapter.is_tensor(side.tensor(np.zeros(1), "float32"))
    assert not any(adapter.is_tensor(value) for value in side.NOT_TENSORS)
    for value, want in side.ENCODED:
        assert adapter.encode_other(value) == want
    assert adapter.encode_other(object()) is NOT_HANDLED


def test_select_rows_is_a_view_of_the_kept_rows_and_leaves_other_shapes_whole(side):
    """``slice`` / ``request_id`` (docs/pytorch/inference.md): the record, statistics and checksum of the
    selected rows are those of the same rows in numpy; a tensor no slice fits is handed back itself."""
    rows = RowSelection((RowSlice(dim=1, begin=-5, end=None, size=33),), request_id="b")
    rows.schedule({"a": 10, "b": 4, "c": 50})  # b: rows 10..13 of 64
    adapter = side.adapter()
    tensor = side.tensor(*STATS_CASES["float32"])
    view = adapter.select_rows(tensor, rows)
    kept = side.host(tensor)[10:14, -5:]
    record, stats = adapter.capture(view)
    (got,) = adapter.fetch([stats])
    assert record.shape == (4, 5) and np.array_equal(side.host(view), kept)
    assert_stats(got, kept, "float32")
    assert adapter.checksum(view) == f"{zlib.crc32(np.ascontiguousarray(kept).tobytes()):08x}"
    other = side.tensor(RNG.standard_normal((63, 33)), "float32")  # dim 0 is not the batch's 64 rows
    assert adapter.select_rows(other, rows).shape[0] == 63
    small = side.tensor(RNG.standard_normal(5), "float32")
    assert adapter.select_rows(small, rows) is small  # nothing fits: the tensor itself
