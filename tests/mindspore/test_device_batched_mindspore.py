"""MindSpore's accelerator path for small tensors: a copy at the call, the reductions per group at the
fetch (``DeviceCopy``). It runs on the CPU here, as on a device; the numbers are checked against float64
numpy and against the per-tensor device path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Parameter, ops

from msprobe.core.dump.device_stats import DeviceCopy
from msprobe.mindspore.adapter import MindSporeTensorAdapter, StatsHandle, device_stats

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # the shared reference (importlib mode)
from stats_reference import close, reference  # noqa: E402

FIELDS = ("max", "min", "mean", "norm", "max_except_inf_nan", "min_except_inf_nan")


def _batch() -> list[ms.Tensor]:
    rng = np.random.default_rng(0)
    arrays = []
    for dtype in (np.float16, np.float32, np.float64, np.int32, np.uint8):
        for shape in [(1,), (4, 8), (3, 5, 7), (4096,)]:
            values = rng.standard_normal(shape) * 3 if np.dtype(dtype).kind == "f" else rng.integers(0, 100, shape)
            arrays.append(values.astype(dtype))
    arrays += [np.array([1.0, np.inf, -3.0, np.nan], np.float32), np.array([np.inf, -np.inf], np.float32)]
    return [ms.Tensor(a) for a in arrays]


def test_small_tensors_are_copied_at_the_call_and_exact_after_one_fetch():
    tensors = _batch()
    handles = [device_stats(t) for t in tensors]
    assert all(isinstance(h, DeviceCopy) for h in handles)
    stats = MindSporeTensorAdapter().fetch(handles)
    for tensor, got in zip(tensors, stats):
        rel = 1e-12 if tensor.dtype in (ms.float64, ms.int32, ms.uint8) else 1e-6
        for field, value in reference(tensor.asnumpy()).items():
            assert close(getattr(got, field), value, rel), (tensor.dtype, tensor.shape, field)


def test_the_batched_rows_agree_with_the_per_tensor_device_path(monkeypatch):
    tensors = _batch()
    batched = MindSporeTensorAdapter().fetch([device_stats(t) for t in tensors])
    monkeypatch.setattr("msprobe.mindspore.adapter._DEVICE_BATCHED_MAX_ELEMENTS", 0)
    single = [device_stats(t) for t in tensors]
    assert all(isinstance(h, StatsHandle) for h in single)
    for tensor, a, b in zip(tensors, batched, MindSporeTensorAdapter().fetch(single)):
        for field in FIELDS:
            assert close(getattr(a, field), getattr(b, field), 1e-6), (tensor.dtype, field)


def test_the_copy_holds_what_the_call_saw():
    """A parameter the optimizer updates in place (``assign``) after the call: the statistics are of
    the value the call saw (``astype`` to a tensor's own dtype would share its memory)."""
    weight = Parameter(ms.Tensor(np.ones((2, 3), np.float32)), name="weight")
    [handle] = [device_stats(weight)]
    ops.assign(weight, weight * 5)
    [stats] = MindSporeTensorAdapter().fetch([handle])
    assert (stats.max, stats.min, stats.mean) == (1.0, 1.0, 1.0)


def test_large_bool_and_complex_tensors_keep_the_per_tensor_path():
    for values in (np.zeros(5000, np.float32), np.array([True, False]), np.array([1 + 2j], np.complex64)):
        assert isinstance(device_stats(ms.Tensor(values)), StatsHandle)


def _dump(out) -> dict:
    """Three Momentum steps of a small network at mix; every tensor record of the dump by its place."""
    from mindspore import nn

    from msprobe.mindspore import PrecisionDebugger

    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(4, 16), nn.ReLU(), nn.Dense(16, 3)])
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda x: ops.square(net(x)).sum(), None, optimizer.parameters)
    debugger = PrecisionDebugger(dump_path=str(out), task="statistics", level="mix")
    rng = np.random.default_rng(1)
    for _ in range(3):
        debugger.start(net)
        _, grads = grad_fn(ms.Tensor(rng.standard_normal((8, 4)).astype(np.float32)))
        optimizer(grads)
        debugger.stop()
        debugger.step()
    found = {}

    def walk(value, path):
        if isinstance(value, dict) and "Max" in value:
            found[path] = value
        elif isinstance(value, (dict, list)):
            for key, item in (value.items() if isinstance(value, dict) else enumerate(value)):
                walk(item, f"{path}.{key}")

    for step in range(3):
        walk(json.loads((out / f"step{step}" / "rank" / "dump.json").read_text())["data"], f"step{step}")
    return found


def test_a_training_run_dumps_the_same_numbers_through_the_device_path(tmp_path, monkeypatch):
    """Every tensor of three Momentum steps at mix sent down the accelerator path (the CPU runs it too):
    the dump agrees with the CPU path's, record for record."""
    host = _dump(tmp_path / "host")
    monkeypatch.setattr(MindSporeTensorAdapter, "stats", lambda self, tensor: device_stats(tensor))
    device = _dump(tmp_path / "device")
    assert host.keys() == device.keys() and len(host) > 50
    for path, want in host.items():
        for key in ("Max", "Min", "Mean", "Norm"):
            assert close(device[path][key], want[key], 1e-6), (path, key)


def test_copies_and_per_tensor_handles_fetched_together_keep_their_order():
    """One fetch of small copies (one transfer with their groups' rows) between large tensors' handles."""
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (12, 5000, 12, 7, 6000)]
    handles = [device_stats(ms.Tensor(a)) for a in arrays]
    assert [type(h) for h in handles] == [DeviceCopy, StatsHandle, DeviceCopy, DeviceCopy, StatsHandle]
    for array, got in zip(arrays, MindSporeTensorAdapter().fetch(handles)):
        for field, value in reference(array).items():
            assert close(getattr(got, field), value, 1e-6), (array.size, field)
