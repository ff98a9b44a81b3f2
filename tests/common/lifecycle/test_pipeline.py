"""The whole core pipeline driven by a framework made of numpy (``numpy_adapter.py``), no torch, no mindspore.

config.json → :func:`~msprobe.core.config.load_debugger_config` → the task's build (from
:mod:`msprobe.core.tasks`, with the numpy kit) → :class:`~msprobe.core.lifecycle.session.Session` with the numpy
interceptor and tensor adapter → calls through :class:`~msprobe.core.lifecycle.calls.CallReporter` as an interceptor
makes them → :class:`~msprobe.core.dump.json_files.StepWriter` → dump.json, stack.json, construct.json and tensor
files on disk → compare of two such dumps. Every number written is checked against float64 numpy.
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import sys
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from msprobe.core.compare.api import compare_api
from msprobe.core.compare.read.rows import flatten_entry
from msprobe.core.compare.read.tensorfile import TensorSpec, load_npy
from msprobe.core.config import load_debugger_config
from msprobe.core.dump.json_files import read_json, step_dir
from msprobe.core.lifecycle.debugger import BaseDebugger
from msprobe.core.lifecycle.naming import tensor_file_name
from msprobe.core.lifecycle.session import Session
from msprobe.core.tasks.registry import task_named

if str(Path(__file__).parents[1]) not in sys.path:  # the numpy "framework" in tests/common (importlib mode)
    sys.path.insert(0, str(Path(__file__).parents[1]))
from numpy_adapter import NumpyInterceptor, NumpyKit, NumpyTensorAdapter  # noqa: E402

# ----------------------------------------------------------------------------------------------- the model


def _linear(x, w, b):
    return x @ w.T + b


class TinyNet:
    """``y = sum(relu(x @ w.T + b), axis=1)``: a module ``block`` (class Block) holding ``block.fc`` (Linear)
    and ``block.act`` (ReLU), and a sum outside it. ``leak`` > 0 is a faulty ReLU kernel that lets part of
    the negative values through: the deliberate difference compare must find."""

    def __init__(self, leak: float = 0.0) -> None:
        rng = np.random.default_rng(7)
        self.x = rng.standard_normal((5, 3)).astype(np.float32)
        self.w = rng.standard_normal((4, 3)).astype(np.float32)
        self.b = rng.standard_normal(4).astype(np.float32)
        self.leak = leak

    def relu(self, h):
        return np.where(h > 0, h, np.float32(self.leak) * h)

    def relu_grad(self, h, g):
        return g * np.where(h > 0, np.float32(1), np.float32(self.leak))

    def forward(self, icp: NumpyInterceptor, x):
        r = icp.module("block", "Block", partial(self._block, icp), x)
        return icp.api("Torch", "sum", np.sum, r, axis=1,
                       vjp=lambda g: (np.ascontiguousarray(np.broadcast_to(g[:, None], r.shape)),))

    def _block(self, icp, x):
        xc = icp.api("Tensor", "to", lambda a, dtype: a.astype(dtype), x, dtype=np.dtype("float32"),
                     vjp=lambda g: (g,))
        h = icp.module("block.fc", "Linear", partial(self._fc, icp), xc)
        return icp.module("block.act", "ReLU", partial(self._act, icp), h)

    def _fc(self, icp, x):
        return icp.api("Functional", "linear", _linear, x, self.w, self.b,
                       vjp=lambda g: (g @ self.w, g.T @ x, g.sum(axis=0)))

    def _act(self, icp, h):
        return icp.api("Functional", "relu", self.relu, h, vjp=lambda g: (self.relu_grad(h, g),))

    def train_step(self, icp: NumpyInterceptor) -> None:
        icp.backward(self.forward(icp, self.x))

    def reference(self) -> dict[str, np.ndarray]:
        """Every tensor of a mix-level dump of :meth:`train_step`, by its report row name, computed here
        without msprobe by the same kernels."""
        x, w, b = self.x, self.w, self.b
        xc = x.astype(np.float32)
        h = _linear(xc, w, b)
        r = self.relu(h)
        y = np.sum(r, axis=1)
        g_r = np.ascontiguousarray(np.broadcast_to(np.ones_like(y)[:, None], r.shape))
        g_h = self.relu_grad(h, g_r)
        g_xc = g_h @ w
        rows = {
            "Tensor.to.0.forward": {"input.0": x, "output.0": xc},
            "Functional.linear.0.forward": {"input.0": xc, "input.1": w, "input.2": b, "output.0": h},
            "Module.block.fc.Linear.forward.0": {"input.0": xc, "output.0": h},
            "Functional.relu.0.forward": {"input.0": h, "output.0": r},
            "Module.block.act.ReLU.forward.0": {"input.0": h, "output.0": r},
            "Module.block.Block.forward.0": {"input.0": x, "output.0": r},
            "Torch.sum.0.forward": {"input.0": r, "output.0": y},
            "Torch.sum.0.backward": {"input.0": np.ones_like(y), "output.0": g_r},
            "Functional.relu.0.backward": {"input.0": g_r, "output.0": g_h},
            "Module.block.act.ReLU.backward.0": {"input.0": g_r, "output.0": g_h},
            "Functional.linear.0.backward": {"input.0": g_h, "output.0": g_xc, "output.1": g_h.T @ xc,
                                             "output.2": g_h.sum(axis=0)},
            "Module.block.fc.Linear.backward.0": {"input.0": g_h, "output.0": g_xc},
            "Tensor.to.0.backward": {"input.0": g_xc, "output.0": g_xc},
            "Module.block.Block.backward.0": {"input.0": g_r, "output.0": g_xc},
        }
        return {f"{entry}.{row}": array for entry, arrays in rows.items() for row, array in arrays.items()}


MIX_ORDER = [  # an entry is written when it completes: inner calls before the module around them
    "Tensor.to.0.forward",
    "Functional.linear.0.forward",
    "Module.block.fc.Linear.forward.0",
    "Functional.relu.0.forward",
    "Module.block.act.ReLU.forward.0",
    "Module.block.Block.forward.0",
    "Torch.sum.0.forward",
    "Torch.sum.0.backward",  # backward in the order autograd runs it
    "Functional.relu.0.backward",
    "Module.block.act.ReLU.backward.0",
    "Functional.linear.0.backward",
    "Module.block.fc.Linear.backward.0",
    "Tensor.to.0.backward",
    "Module.block.Block.backward.0",
]
MIX_PARENTS = {
    "Tensor.to.0.forward": "Module.block.Block.forward.0",
    "Functional.linear.0.forward": "Module.block.fc.Linear.forward.0",
    "Module.block.fc.Linear.forward.0": "Module.block.Block.forward.0",
    "Functional.relu.0.forward": "Module.block.act.ReLU.forward.0",
    "Module.block.act.ReLU.forward.0": "Module.block.Block.forward.0",
    "Module.block.Block.forward.0": None,
    "Torch.sum.0.forward": None,
    "Torch.sum.0.backward": None,
    "Functional.relu.0.backward": "Module.block.act.ReLU.backward.0",
    "Module.block.act.ReLU.backward.0": "Module.block.Block.backward.0",
    "Functional.linear.0.backward": "Module.block.fc.Linear.backward.0",
    "Module.block.fc.Linear.backward.0": "Module.block.Block.backward.0",
    "Tensor.to.0.backward": "Module.block.Block.backward.0",
    "Module.block.Block.backward.0": None,
}

# ------------------------------------------------------------------------------------------------ helpers


def config_for(tmp_path: Path, name: str = "dump", **fields):
    """A config.json with ``fields`` (``section`` goes under the task's key), loaded as the debugger does."""
    section = fields.pop("section", {})
    body = {"task": "statistics", "dump_path": str(tmp_path / name), "level": "mix", **fields}
    body[body["task"]] = section
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(body))
    return load_debugger_config(path, framework=NumpyKit.name)


def session_for(config) -> tuple[Session, NumpyTensorAdapter]:
    """What the debugger does: the task's build, from the registry, with the numpy kit."""
    kit = NumpyKit()
    session = task_named(config.task).build(config, kit, lambda: None)
    return session, kit.tensor_adapter


def dump_one_step(config, net: TinyNet | None = None, run=None) -> tuple[Path, Session, NumpyTensorAdapter]:
    """Step 0 of ``run(interceptor)`` (default: one training step of ``net``); returns the step directory."""
    net = net or TinyNet()
    session, adapter = session_for(config)
    session.start(net)
    (run or net.train_step)(session.interceptor)
    session.stop()
    return step_dir(config.dump_path, 0, None), session, adapter


def tensor_rows(dump: dict) -> dict[str, dict]:
    """Every tensor in dump.json by its report row name (``Functional.linear.0.forward.input.1``)."""
    return {row.name: row.value for name, entry in dump["data"].items() for row in flatten_entry(name, entry)
            if row.is_tensor}


def same(actual, expected) -> bool:
    if expected is None or isinstance(expected, bool):
        return actual is expected
    if math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    if math.isinf(expected):
        return actual == expected
    return actual == pytest.approx(expected, rel=2e-6, abs=1e-6)  # float32 reduces in float32


def expected_record(array: np.ndarray) -> dict:
    """dump.json's value of ``array``, statistics from float64 numpy (docs/dump_format.md#values), keys in
    1.1.1's order."""
    record = {"type": "numpy.ndarray", "dtype": str(array.dtype), "shape": list(array.shape)}
    if array.size == 0:
        return {**record, "Max": None, "Min": None, "Mean": None, "Norm": None}
    if array.dtype == np.bool_:
        return {**record, "Max": bool(array.any()), "Min": bool(array.all()), "Mean": None, "Norm": None}
    values = array.astype(np.float64).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        record.update(Max=float(values.max()), Min=float(values.min()), Mean=float(values.mean()),
                      Norm=float(np.sqrt(values @ values)))
    finite = values[np.isfinite(values)]
    if not math.isfinite(record["Max"]):
        record["Max_except_inf_nan"] = float(finite.max()) if finite.size else None
    if not math.isfinite(record["Min"]):
        record["Min_except_inf_nan"] = float(finite.min()) if finite.size else None
    return record


def check_record(name: str, value: dict, array: np.ndarray, *extra_keys: str) -> None:
    expected = expected_record(array)
    assert list(value) == [*expected, *extra_keys], name
    for key, number in expected.items():
        assert same(value[key], number) if key[0].isupper() else value[key] == number, (name, key, value[key], number)


def crc32(array: np.ndarray) -> str:
    return f"{zlib.crc32(np.ascontiguousarray(array).tobytes()) & 0xFFFFFFFF:08x}"


# ------------------------------------------------------------------------------------------------- dumps


def test_statistics_at_mix_level_record_every_call_with_exact_statistics(tmp_path):
    net = TinyNet()
    directory, session, adapter = dump_one_step(config_for(tmp_path), net)
    dump = read_json(directory / "dump.json")
    assert {k: v for k, v in dump.items() if k != "data"} == {"task": "statistics", "level": "mix",
                                                               "dump_data_dir": None}
    assert list(dump["data"]) == MIX_ORDER
    assert not (directory / "dump_tensor_data").exists()

    expected = net.reference()
    rows = tensor_rows(dump)
    assert set(rows) == set(expected)  # every tensor argument, output and gradient, and nothing else
    for name, value in rows.items():
        check_record(name, value, expected[name])

    # non-tensor arguments: what msprobe.core.dump.encode writes, and the adapter's encode_other for a dtype
    assert dump["data"]["Tensor.to.0.forward"]["input_kwargs"] == {"dtype": {"type": "numpy.dtype", "value": "float32"}}
    assert dump["data"]["Torch.sum.0.forward"]["input_kwargs"] == {"axis": {"type": "int", "value": 1}}
    assert set(dump["data"]["Functional.linear.0.forward"]) == {"input_args", "input_kwargs", "output"}
    assert set(dump["data"]["Functional.linear.0.backward"]) == {"input", "output"}

    construct = read_json(directory / "construct.json")
    assert construct == MIX_PARENTS and list(construct) == MIX_ORDER

    stacks = read_json(directory / "stack.json")  # forward entries, in the order they started
    assert list(stacks) == [
        "Module.block.Block.forward.0", "Tensor.to.0.forward", "Module.block.fc.Linear.forward.0",
        "Functional.linear.0.forward", "Module.block.act.ReLU.forward.0", "Functional.relu.0.forward",
        "Torch.sum.0.forward",
    ]
    assert all(any("test_pipeline.py" in frame for frame in frames) for frames in stacks.values())
    assert not any("msprobe/core" in frame for frames in stacks.values() for frame in frames)

    # statistics are launched per tensor and brought to the host in one batch at the end of the step
    assert adapter.fetch_sizes == [len(rows)]
    assert session.interceptor.reporter.paused is False


def test_levels_L0_and_L1_keep_modules_or_apis_only(tmp_path):
    expected = TinyNet().reference()
    for level in ("L0", "L1"):
        directory, _, _ = dump_one_step(config_for(tmp_path, f"dump_{level}", level=level))
        dump = read_json(directory / "dump.json")
        names = list(dump["data"])
        assert names == [n for n in MIX_ORDER if n.startswith("Module.") == (level == "L0")], level
        # construct.json is written at the module levels only, each module inside the one around it
        construct = read_json(directory / "construct.json")
        assert construct == ({n: MIX_PARENTS[n] for n in names} if level == "L0" else {}), level
        for name, value in tensor_rows(dump).items():  # at L0 gradients flow through APIs nobody records
            check_record(name, value, expected[name])


def test_md5_mode_adds_the_crc32_of_every_tensor(tmp_path):
    net = TinyNet()
    directory, _, _ = dump_one_step(config_for(tmp_path, section={"summary_mode": "md5"}), net)
    expected = net.reference()
    rows = tensor_rows(read_json(directory / "dump.json"))
    assert set(rows) == set(expected)
    for name, value in rows.items():
        check_record(name, value, expected[name], "md5")
        assert value["md5"] == crc32(expected[name]), name
        assert len(value["md5"]) == 8 and value["md5"] == value["md5"].lower()


def test_tensor_mode_writes_readable_npy_files_named_after_their_rows(tmp_path):
    net = TinyNet()
    directory, _, _ = dump_one_step(config_for(tmp_path, task="tensor"), net)
    dump = read_json(directory / "dump.json")
    tensor_dir = directory / "dump_tensor_data"
    assert dump["task"] == "tensor" and dump["dump_data_dir"] == str(tensor_dir)
    expected = net.reference()
    rows = tensor_rows(dump)
    assert set(rows) == set(expected)
    for name, value in rows.items():
        check_record(name, value, expected[name], "data_name")
        assert value["data_name"] == name + ".npy"
        path = tensor_dir / value["data_name"]
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o027 == 0  # no write for the group, nothing for others
        loaded = load_npy(path, TensorSpec.of(value))  # the compare loader: checks the header against dump.json
        assert loaded.dtype == expected[name].dtype and np.array_equal(loaded, expected[name]), name
        assert np.array_equal(np.load(path, allow_pickle=False), expected[name])
    assert sorted(p.name for p in tensor_dir.iterdir()) == sorted(v["data_name"] for v in rows.values())


def values_of_every_kind(icp: NumpyInterceptor) -> None:
    """APIs on float64 with inf and NaN, bool, int64, float16 beyond its range, an empty array, nested
    lists, numpy scalars, slices, None, and an in-place API."""
    a = np.array([[1.5, -2.0, 0.0], [np.inf, 3.0, np.nan]])
    icp.api("Torch", "where", np.where, a > 0, a, np.float32(0.5))
    icp.api("Tensor", "__getitem__", lambda t, i: t[i], np.arange(6), slice(1, None, 2))
    big, empty = np.full((2, 3), 60000, dtype=np.float16), np.zeros((0, 3), dtype=np.float16)
    icp.api("Torch", "cat", np.concatenate, [big, empty], axis=0, out=None)
    icp.api("Tensor", "mul_", lambda t, k: np.multiply(t, k, out=t), np.array([1, 2, 3], dtype=np.float32), 2.0,
            mutates=True)


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_values_of_every_kind(tmp_path, task):
    directory, _, _ = dump_one_step(config_for(tmp_path, task=task, level="L1"), run=values_of_every_kind)
    data = read_json(directory / "dump.json")["data"]
    assert list(data) == ["Torch.where.0.forward", "Tensor.__getitem__.0.forward", "Torch.cat.0.forward",
                          "Tensor.mul_.0.forward"]
    a = np.array([[1.5, -2.0, 0.0], [np.inf, 3.0, np.nan]])
    big = np.full((2, 3), 60000, dtype=np.float16)
    expected = {
        "Torch.where.0.forward.input.0": a > 0,
        "Torch.where.0.forward.input.1": a,
        "Torch.where.0.forward.output.0": np.where(a > 0, a, 0.5),
        "Tensor.__getitem__.0.forward.input.0": np.arange(6),
        "Tensor.__getitem__.0.forward.output.0": np.array([1, 3, 5]),
        "Torch.cat.0.forward.input.0.0": big,
        "Torch.cat.0.forward.input.0.1": np.zeros((0, 3), dtype=np.float16),
        "Torch.cat.0.forward.output.0": big,
        "Tensor.mul_.0.forward.input.0": np.array([1, 2, 3], dtype=np.float32),  # as it was before the call
        "Tensor.mul_.0.forward.output.0": np.array([2, 4, 6], dtype=np.float32),
    }
    rows = tensor_rows({"data": data})
    assert set(rows) == set(expected)
    extra = ("data_name",) if task == "tensor" else ()
    for name, value in rows.items():
        check_record(name, value, expected[name], *extra)
        if task == "tensor":
            path = directory / "dump_tensor_data" / value["data_name"]
            assert np.array_equal(load_npy(path, TensorSpec.of(value)), expected[name], equal_nan=True), name
    assert rows["Torch.where.0.forward.output.0"]["Max_except_inf_nan"] == 3.0
    assert rows["Torch.cat.0.forward.output.0"]["Norm"] == pytest.approx(60000 * math.sqrt(6))  # no float16 overflow
    assert data["Torch.where.0.forward"]["input_args"][2] == {"type": "float32", "value": 0.5}
    assert data["Tensor.__getitem__.0.forward"]["input_args"][1] == {"type": "slice", "value": [1, None, 2]}
    assert data["Torch.cat.0.forward"]["input_kwargs"] == {"axis": {"type": "int", "value": 0}, "out": None}
    assert data["Tensor.mul_.0.forward"]["input_args"][1] == {"type": "float", "value": 2.0}
    if task == "tensor":
        assert rows["Torch.cat.0.forward.input.0.1"]["data_name"] == tensor_file_name(
            "Torch.cat.0.forward", "input", (0, 1), ".npy")


def test_selection_steps_and_the_end_of_the_run(tmp_path):
    """list selects a module's span and the gradients of what it selected; counters restart each step;
    nothing is seen outside start/stop; after the last step the session finishes and detaches."""
    config = config_for(tmp_path, step=[0, 1], section={"list": ["Linear"]})
    session, _ = session_for(config)
    net = TinyNet()
    icp = None
    for _ in range(3):
        session.start(net)
        icp = session.interceptor
        net.train_step(icp)
        session.forward_backward_dump_end()
        icp.api("Functional", "linear", _linear, net.x, net.w, net.b)  # e.g. the optimizer: not collected
        session.step()
    selected = ["Functional.linear.0.forward", "Module.block.fc.Linear.forward.0",
                "Functional.linear.0.backward", "Module.block.fc.Linear.backward.0"]
    for step in (0, 1):
        directory = step_dir(config.dump_path, step, None)
        assert list(read_json(directory / "dump.json")["data"]) == selected
        assert list(read_json(directory / "construct.json")) == selected
        assert list(read_json(directory / "stack.json")) == selected[1::-1]  # in the order they started
    assert not (Path(config.dump_path) / "step2").exists()
    assert session.finished and icp.detached and not icp.reporter.active


def test_data_mode_forward_inputs_only(tmp_path):
    config = config_for(tmp_path, level="L1", section={"data_mode": ["forward", "input"]})
    directory, _, _ = dump_one_step(config)
    data = read_json(directory / "dump.json")["data"]
    assert list(data) == [n for n in MIX_ORDER if not n.startswith("Module.") and n.endswith("forward")]
    assert all(set(entry) == {"input_args", "input_kwargs"} for entry in data.values())


# ----------------------------------------------------------------------------------------- overflow check


def overflowing_calls(icp: NumpyInterceptor) -> None:
    ok = np.array([1.0, 2.0], dtype=np.float32)
    with np.errstate(over="ignore", divide="ignore"):
        icp.api("Torch", "mul", np.multiply, ok, 3.0)  # finite: not kept
        e = icp.api("Torch", "exp", np.exp, np.array([100.0, 1.0], dtype=np.float32))  # inf from finite inputs
        icp.api("Torch", "add", np.add, e, 1.0)  # inf carried in
        icp.api("Tensor", "mul_", lambda t, k: np.multiply(t, k, out=t),  # in place: inputs as they were
                np.array([1e19, 1.0], dtype=np.float32), 1e20, mutates=True)
        z = np.array([0.0, 4.0], dtype=np.float32)
        q = icp.api("Torch", "sqrt", np.sqrt, z, vjp=lambda g: (g * np.float32(0.5) / np.sqrt(z),))
        icp.api("Torch", "sub", np.subtract, ok, 1.0)  # finite: not kept
        icp.backward(q)  # sqrt's gradient at 0 is inf: its backward is an origin


def test_overflow_check_keeps_only_non_finite_calls_and_finds_their_origin(tmp_path, msprobe_log):
    config = config_for(tmp_path, task="overflow_check", level="L1", section={"overflow_nums": -1})
    directory, session, _ = dump_one_step(config, run=overflowing_calls)
    dump = read_json(directory / "dump.json")
    assert dump["task"] == "overflow_check"
    kinds = {"Torch.exp.0.forward": "origin", "Torch.add.0.forward": "inherited",
             "Tensor.mul_.0.forward": "origin", "Torch.sqrt.0.backward": "origin"}
    assert list(dump["data"]) == list(kinds)
    assert read_json(directory / "overflow.json") == kinds
    assert list(read_json(directory / "stack.json")) == list(kinds)
    assert "Torch.exp.0.forward is the first origin" in msprobe_log.text()

    with np.errstate(over="ignore", divide="ignore"):
        expected = {
            "Torch.exp.0.forward.input.0": np.array([100.0, 1.0], dtype=np.float32),
            "Torch.exp.0.forward.output.0": np.exp(np.array([100.0, 1.0], dtype=np.float32)),
            "Torch.add.0.forward.input.0": np.exp(np.array([100.0, 1.0], dtype=np.float32)),
            "Torch.add.0.forward.output.0": np.exp(np.array([100.0, 1.0], dtype=np.float32)) + 1.0,
            "Tensor.mul_.0.forward.input.0": np.array([1e19, 1.0], dtype=np.float32),
            "Tensor.mul_.0.forward.output.0": np.array([1e19, 1.0], dtype=np.float32) * np.float32(1e20),
            "Torch.sqrt.0.backward.input.0": np.ones(2, dtype=np.float32),
            "Torch.sqrt.0.backward.output.0": np.float32(0.5) / np.sqrt(np.array([0.0, 4.0], dtype=np.float32)),
        }
    rows = tensor_rows(dump)
    assert set(rows) == set(expected)
    for name, value in rows.items():  # overflow check keeps the tensors of its hits
        check_record(name, value, expected[name], "data_name")
        loaded = load_npy(directory / "dump_tensor_data" / value["data_name"], TensorSpec.of(value))
        assert np.array_equal(loaded, expected[name]), name
    assert not session.collector.exhausted


def test_overflow_nums_ends_the_run(tmp_path):
    config = config_for(tmp_path, task="overflow_check", level="L1", section={"overflow_nums": 2})
    directory, session, _ = dump_one_step(config, run=overflowing_calls)
    assert list(read_json(directory / "dump.json")["data"]) == ["Torch.exp.0.forward", "Torch.add.0.forward"]
    assert session.collector.exhausted and not session.finished
    session.step()
    assert session.finished and session.interceptor.detached


# ----------------------------------------------------------------------------------------------- compare


@pytest.mark.parametrize("task,section,mode,failing", [
    ("tensor", {}, "tensor", "No"),
    ("statistics", {}, "summary", "Warning"),
    ("statistics", {"summary_mode": "md5"}, "md5", "Different"),
], ids=["tensor", "summary", "md5"])
def test_compare_names_the_call_that_differs(tmp_path, task, section, mode, failing):
    """Two runs of the model, one with a faulty ReLU kernel: the report names that call, nothing before it."""
    dumps = {}
    for side, leak in (("npu", 0.5), ("bench", 0.0)):
        config = config_for(tmp_path, side, task=task, section=section)
        dumps[side] = dump_one_step(config, TinyNet(leak))[0] / "dump.json"
    out = tmp_path / "out"
    result = compare_api(load_npy, {"npu_path": str(dumps["npu"]), "bench_path": str(dumps["bench"])}, out)
    assert result.mode == mode and result.not_compared == 0
    assert result.first_divergence is not None and result.first_divergence.entry == "Functional.relu.0.forward"
    assert result.first_divergence.inputs_pass

    with open(result.reports["csv"], newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    verdict = "Accuracy Reached or Not" if mode == "tensor" else "Result"
    by_name = {row["NPU Name"]: row for row in table}
    assert by_name["Functional.relu.0.forward.output.0"][verdict] == failing
    assert by_name["Functional.relu.0.forward.input.0"][verdict] != failing
    before = MIX_ORDER[: MIX_ORDER.index("Functional.relu.0.forward")]
    assert all(row[verdict] != failing for row in table if row["NPU Name"].rsplit(".", 2)[0] in before)
    assert "First divergence: Functional.relu.0.forward" in result.reports["html"].read_text(encoding="utf-8")
    assert {path.suffix for path in result.reports.values()} == {".xlsx", ".csv", ".html"}


# -------------------------------------------------------------------------------------- the debugger frame


class NumpyDebugger(BaseDebugger):
    """How a framework plugs in: BaseDebugger does the configuration, the dump_path hold, the task and the
    lifecycle; the framework gives its kit."""

    kit_class = NumpyKit


def test_a_debugger_built_on_the_numpy_adapter(tmp_path):
    net = TinyNet()
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "mix",
                                       "step": [0]}))
    debugger = NumpyDebugger(str(config_path))
    assert NumpyDebugger(str(config_path)) is debugger  # the same configuration again: the running one
    debugger.start(net)
    net.train_step(debugger.interceptor)
    debugger.stop()
    debugger.step()
    assert debugger.finished
    dump = read_json(step_dir(tmp_path / "dump", 0, None) / "dump.json")
    assert list(dump["data"]) == MIX_ORDER


def test_level_debug_saves_count_per_name_and_step_and_hold_the_statistics(tmp_path):
    """Level debug without a framework (docs/pytorch/dump.md#level-debug-save): names counted per name and
    step, nested values encoded as dump.json encodes arguments, numbers against float64 numpy; numpy has no
    gradients, so every gradient entry is null."""
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"),
                                       "level": "debug", "step": [1, 2]}))
    debugger = NumpyDebugger(str(config_path))
    rng = np.random.default_rng(0)
    saved = []
    for _ in range(3):
        array = rng.standard_normal((3, 5)).astype(np.float32)
        saved.append(array)
        debugger.save(array, "a")
        debugger.save({"x": [array, 2], "lr": 0.5}, "a", save_backward=False)
        debugger.step()
    assert not (tmp_path / "dump" / "step0").exists()  # step selects as in any dump
    for step in (1, 2):
        debug = read_json(step_dir(tmp_path / "dump", step, None) / "debug.json")
        assert (debug["task"], debug["level"]) == ("statistics", "debug")
        data = debug["data"]
        assert list(data) == ["a.0.debug", "a_grad.0.debug", "a.1.debug"]
        values = saved[step].astype(np.float64)
        record = data["a.0.debug"]
        assert record["shape"] == [3, 5] and record["Max"] == pytest.approx(values.max(), rel=1e-6)
        assert record["Norm"] == pytest.approx(math.sqrt((values ** 2).sum()), rel=1e-6)
        assert data["a_grad.0.debug"] is None
        assert data["a.1.debug"]["x"][1] == {"type": "int", "value": 2}
        assert data["a.1.debug"]["lr"] == {"type": "float", "value": 0.5}
        assert data["a.1.debug"]["x"][0]["Mean"] == pytest.approx(values.mean(), rel=1e-6, abs=1e-7)
        assert sorted(p.name for p in step_dir(tmp_path / "dump", step, None).iterdir()) == ["debug.json"]
