"""The framework-free value encoder: the table of docs/dump_format.md#values, nesting, index paths, and 1.1.1's
format."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.dump.encode import encode_value, render
from msprobe.core.contract import NOT_HANDLED, TensorRecord, TensorStats

REFERENCE = str(Path(__file__).resolve().parents[1] / "data" / "reference-outputs")


class ArrayLeaf:
    """A framework hook for tests: numpy arrays play the tensors, and every call is recorded."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def __call__(self, value, path):
        self.seen.append(path)
        if isinstance(value, np.ndarray):
            data = value.astype(np.float64)
            stats = TensorStats(data.max(), data.min(), data.mean(), float(np.linalg.norm(data.ravel())))
            return TensorRecord(
                "numpy.ndarray", str(value.dtype), value.shape, stats=stats, data_name=str(path)
            )
        return NOT_HANDLED


def no_leaf(value, path):
    return NOT_HANDLED


def reference_entry(run: str, name: str) -> dict:
    with open(f"{REFERENCE}/{run}/step0/rank/dump.json") as handle:
        return json.load(handle)["data"][name]


class Color(enum.IntEnum):
    RED = 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, {"type": "bool", "value": True}),
        (0, {"type": "int", "value": 0}),
        (-7, {"type": "int", "value": -7}),
        (Color.RED, {"type": "int", "value": 3}),
        (2.5, {"type": "float", "value": 2.5}),
        ("mean", {"type": "str", "value": "mean"}),
        (np.float32(1.5), {"type": "float32", "value": 1.5}),
        (np.float64(0.25), {"type": "float64", "value": 0.25}),
        (np.int64(9), {"type": "int64", "value": 9}),
        (np.bool_(False), {"type": "bool_", "value": False}),
        (slice(1, None, 2), {"type": "slice", "value": [1, None, 2]}),
        (slice(None), {"type": "slice", "value": [None, None, None]}),
        (slice(np.int64(2), np.int32(5)), {"type": "slice", "value": [2, 5, None]}),
        (Ellipsis, {"type": "ellipsis", "value": "..."}),
        (None, None),
        ([], []),
        ({}, {}),
    ],
)
def test_value_table(value, expected):
    encoded = encode_value(value, no_leaf)
    assert encoded == expected
    assert type(json.loads(json.dumps(encoded))) is type(expected)
    if expected:
        assert type(encoded["value"]) is type(expected["value"])  # Python values: JSON can write them


def test_non_finite_floats_keep_their_value():
    assert math.isnan(encode_value(float("nan"), no_leaf)["value"])
    assert json.dumps(encode_value(float("-inf"), no_leaf)) == '{"type": "float", "value": -Infinity}'


def test_scalars_and_nested_tuples_as_1_1_1_wrote_them():
    conv = reference_entry("pytorch/pt_statistics_L1_fp32", "Functional.conv2d.0.forward")
    # F.conv2d(x, weight, bias, stride, padding, dilation, groups) with the Conv2d defaults
    assert encode_value(((1, 1), (1, 1), (1, 1), 1), no_leaf) == conv["input_args"][3:]
    flatten = reference_entry("pytorch/pt_statistics_L1_fp32", "Tensor.flatten.0.forward")
    assert encode_value(1, no_leaf) == flatten["input_args"][1]
    mul = reference_entry("mindspore/ms_stat_mix", "Primitive.mul.Mul.0.forward")
    assert encode_value(2.0, no_leaf) in mul["input_args"]
    truth = reference_entry("pytorch/pt_statistics_L1_fp32", "Tensor.__bool__.0.forward")
    assert [encode_value(True, no_leaf)] == truth["output"]


def test_nesting_gives_each_leaf_its_index_path():
    leaf = ArrayLeaf()
    a = np.arange(6.0).reshape(2, 3)
    args = (a, [a, (a, 4)], {"weight": a, "bias": None})
    encoded = json.loads(render(encode_value(args, leaf)))
    data_names = [encoded[0]["data_name"], encoded[1][0]["data_name"], encoded[1][1][0]["data_name"]]
    assert data_names == ["(0,)", "(1, 0)", "(1, 1, 0)"]
    assert encoded[2]["weight"]["data_name"] == "(2, 'weight')"
    assert encoded[1][1][1] == {"type": "int", "value": 4}
    assert encoded[2]["bias"] is None
    # the hook saw every value that is not exactly one of Python's own types (tuple, list, dict, None,
    # bool, int, float, str), before the built-in rules
    assert leaf.seen == [(0,), (1, 0), (1, 1, 0), (2, "weight")]


def test_tensor_records_become_dump_json_dicts_with_exact_statistics():
    a = np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32)
    encoded = json.loads(render(encode_value([a], ArrayLeaf(), ("input",))))
    assert encoded == [
        {
            "type": "numpy.ndarray",
            "dtype": "float32",
            "shape": [2, 2],
            "Max": 3.0,
            "Min": -2.0,
            "Mean": 0.625,
            "Norm": math.sqrt(1 + 4 + 9 + 0.25),
            "data_name": "('input', 0)",
        }
    ]
    assert list(encoded[0]) == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "data_name"]


def test_records_render_non_finite_bool_and_missing_statistics_as_json_would():
    inf = float("inf")
    records = [
        TensorRecord("t", "float32", (3,), True, TensorStats(inf, -inf, float("nan"), inf, 2.0, None), md5="0a0b0c0d"),
        TensorRecord("t", "bool", (2, 1), False, TensorStats(True, False, None, None), data_name="x.pt"),
        TensorRecord("t", "float16", (0,), None, TensorStats(None, None, None, None)),
        TensorRecord("t", "int64", (), None, None),
    ]
    entry = {"input_args": [records[0], {"type": "slice", "value": [1, None, 2]}], "input_kwargs": {"dim": records[1]},
             "output": [records[2], None, records[3], {"type": "float", "value": -inf}]}
    parsed = json.loads(render(entry))
    first = parsed["input_args"][0]
    assert list(first) == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad",
                           "Max_except_inf_nan", "Min_except_inf_nan", "md5"]
    assert (first["Max"], first["Min"], first["Norm"]) == (inf, -inf, inf) and math.isnan(first["Mean"])
    assert (first["Max_except_inf_nan"], first["Min_except_inf_nan"]) == (2.0, None)
    assert parsed["input_args"][1] == {"type": "slice", "value": [1, None, 2]}
    assert parsed["input_kwargs"]["dim"] == {"type": "t", "dtype": "bool", "shape": [2, 1], "Max": True, "Min": False,
                                             "Mean": None, "Norm": None, "requires_grad": False, "data_name": "x.pt"}
    assert parsed["output"][0] == {"type": "t", "dtype": "float16", "shape": [0], "Max": None, "Min": None,
                                   "Mean": None, "Norm": None}
    assert parsed["output"][1] is None and parsed["output"][2]["shape"] == []
    assert parsed["output"][3] == {"type": "float", "value": -inf}
    assert render(entry) == render(entry)  # the cached statistics text gives the same line again


def test_keyword_arguments_named_type_and_value_render_their_tensors():
    record = TensorRecord("t", "float32", (1,), None, TensorStats(1.0, 1.0, 1.0, 1.0))
    for kwargs in ({"value": None, "input": record}, {"type": None, "value": record},
                   {"type": encode_value("mean", no_leaf), "value": record}):
        parsed = json.loads(render({"input_kwargs": kwargs}))["input_kwargs"]
        tensors = [v for v in parsed.values() if isinstance(v, dict) and v.get("type") == "t"]
        assert len(tensors) == 1 and tensors[0]["Max"] == 1.0


def test_leaf_claims_come_first_even_for_containers():
    class Size(tuple):
        pass

    def size_leaf(value, path):
        return list(value) if isinstance(value, Size) else NOT_HANDLED

    assert encode_value([Size((2, 3)), (2, 3)], size_leaf) == [
        [2, 3],
        [{"type": "int", "value": 2}, {"type": "int", "value": 3}],
    ]


def test_dict_keys_are_written_as_strings():
    assert encode_value({1: "a"}, no_leaf) == {"1": {"type": "str", "value": "a"}}


def test_unknown_values_become_null_with_one_warning_per_type(msprobe_log):
    class Opaque:
        pass

    class Other:
        pass

    assert encode_value([Opaque(), Opaque(), Other(), 1 + 2j], no_leaf) == [None, None, None, None]
    encode_value(Opaque(), no_leaf)

    def local_lines():
        return [m for m in msprobe_log.messages if "cannot show values of type" in m and "<locals>" in m]

    assert len(local_lines()) == 2
    assert any("Opaque" in m for m in local_lines()) and any("Other" in m for m in local_lines())


def test_slice_bound_that_is_not_an_integer_becomes_null_with_a_warning(msprobe_log):
    class Label:
        pass

    assert encode_value(slice(Label(), 3), no_leaf) == {"type": "slice", "value": [None, 3, None]}
    assert "slice bound" in msprobe_log.text()
