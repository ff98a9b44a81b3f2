"""The accelerator path for small tensors: one copy launched at the call, reductions per group at the
fetch (``DeviceCopy``). It runs on the CPU here, as it would on a device: the numbers are checked
against float64 numpy, the launches are counted with a dispatch mode (the host's work per call on an
accelerator is its launches)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from msprobe.core.dump.device_stats import DeviceCopy
from msprobe.pytorch.adapter import StatsHandle, TorchTensorAdapter, _device_stats, _Exact, _float_stats

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # the shared reference (importlib mode)
from stats_reference import close, reference  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.uint8, torch.int64]


def _batch() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    tensors = []
    for dtype in DTYPES:
        for shape in [(1,), (4, 8), (3, 5, 7), (4096,)]:
            if dtype.is_floating_point:
                tensors.append((torch.randn(shape, generator=gen) * 3).to(dtype))
            else:
                tensors.append(torch.randint(0, 100, shape, generator=gen).to(dtype))
    tensors.append(torch.tensor([1.0, math.inf, -3.0, math.nan]))
    tensors.append(torch.tensor([math.inf, -math.inf]))
    tensors.append(torch.tensor([[2.0, -math.inf], [0.5, 4.0]]).t())  # not contiguous, one -inf
    return tensors


def _launch(tensors: list[torch.Tensor]) -> list:
    with _Exact(tensors[0]):
        return [_device_stats(t) for t in tensors]


def test_small_tensors_are_copied_at_the_call_and_exact_after_one_fetch():
    tensors = _batch()
    handles = _launch(tensors)
    assert all(isinstance(h, DeviceCopy) for h in handles)
    expected = [reference(t.to(torch.float64).numpy()) for t in tensors]
    for t in tensors:
        if t.dtype.is_floating_point:
            t.add_(1000.0)  # changed in place after the call: the statistics are of what the call saw
    stats = TorchTensorAdapter().fetch(handles)
    for tensor, got, want in zip(tensors, stats, expected):
        rel = 1e-12 if tensor.dtype in (torch.float64, torch.int32, torch.uint8, torch.int64) else 1e-6
        for field, value in want.items():
            assert close(getattr(got, field), value, rel), (tensor.dtype, tuple(tensor.shape), field)


def test_the_batched_rows_agree_with_the_per_tensor_device_path():
    tensors = _batch()
    adapter = TorchTensorAdapter()
    batched = adapter.fetch(_launch(tensors))
    with _Exact(tensors[0]):
        single = adapter.fetch([StatsHandle(_float_stats(t)) for t in tensors])
    for tensor, a, b in zip(tensors, batched, single):
        for field in ("max", "min", "mean", "norm", "max_except_inf_nan", "min_except_inf_nan"):
            assert close(getattr(a, field), getattr(b, field), 1e-6), (tensor.dtype, field)


# Operators that only describe memory (no kernel runs on a device).
_METADATA = {"aten::view", "aten::unbind", "aten::resolve_conj", "aten::resolve_neg", "aten::alias"}


def _launched(run) -> int:
    """Operators ``run()`` dispatches, counted by the profiler (it sees them inside ``_Exact``, which
    hides them from dispatch modes), metadata operators left out: the host's work per launch."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        run()
    return sum(1 for e in profiler.events()
               if e.cpu_parent is None and e.name.startswith("aten::") and e.name not in _METADATA)


def _launches(tensors: list[torch.Tensor]) -> tuple[float, int]:
    """(launches per tensor at the call, launches of the fetch) for ``tensors``."""
    handles: list = []
    at_call = _launched(lambda: handles.extend(_device_stats(t) for t in tensors))
    at_fetch = _launched(lambda: TorchTensorAdapter().fetch(handles))
    return at_call / len(tensors), at_fetch


def test_a_small_tensor_costs_one_launch_and_the_fetch_grows_with_groups_not_tensors():
    def three_groups(per_group: int) -> list[torch.Tensor]:
        return [torch.randn(shape) for _ in range(per_group) for shape in [(4, 8), (16,), (3, 3)]]

    per_tensor, few = _launches(three_groups(10))
    _, many = _launches(three_groups(100))
    assert per_tensor == 1  # the copy (the per-tensor path launches a dozen: see below)
    assert many == few  # 300 tensors fetch with the launches of 30: per group, plus the one transfer
    assert few <= 3 * 12
    single = _launched(lambda: _float_stats(torch.randn(4, 8)))
    assert single >= 10


def test_a_repeated_copy_is_reduced_once_and_reads_the_same_in_a_later_batch():
    adapter = TorchTensorAdapter()
    tensor = torch.randn(5, 5)
    [handle] = _launch([tensor])
    first = adapter.fetch([handle, handle])
    later = adapter.fetch([handle])
    assert first[0] == first[1] == later[0]
    assert handle.values is None  # the copy is let go once reduced


def test_large_bool_and_complex_tensors_keep_the_per_tensor_path():
    for tensor in (torch.randn(5000), torch.tensor([True, False]), torch.randn(4, dtype=torch.complex64)):
        [handle] = _launch([tensor])
        assert isinstance(handle, StatsHandle)


@pytest.mark.parametrize("name", ["llama", "inplace_resnet"])
def test_a_whole_model_dumps_the_same_numbers_through_the_device_path(name, tmp_path, monkeypatch):
    """Every tensor of a real model's step sent down the accelerator path (the CPU runs it too): many
    groups of shapes and dtypes, repeats served by the same copy, batches fetched mid-step. The dump
    agrees with the CPU path's entry for entry, LLaMA's causal mask included (filled with float32's
    minimum: its exact Mean and Norm, beyond float32's range, are finite on both paths)."""
    from zoo import ZOO, dump_one_step

    spec = next(spec for spec in ZOO if spec.name == name)
    host_dir = dump_one_step(spec, tmp_path / "host", "statistics", "mix", None, None)
    monkeypatch.setattr(TorchTensorAdapter, "_compute_stats", lambda self, t: _device_stats(t.detach()))
    device_dir = dump_one_step(spec, tmp_path / "device", "statistics", "mix", None, None)

    def records(rank_dir):
        data = json.loads((rank_dir / "dump.json").read_text())["data"]
        found = {}

        def walk(value, path):
            if isinstance(value, dict) and "Max" in value:
                found[path] = value
            elif isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{path}.{key}")
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    walk(item, f"{path}.{index}")

        walk(data, "")
        return found

    host, device = records(host_dir), records(device_dir)
    assert host.keys() == device.keys() and len(host) > 100
    for path, want in host.items():
        got = device[path]
        assert got.keys() == want.keys(), path
        for key in ("Max", "Min", "Mean", "Norm", "Max_except_inf_nan", "Min_except_inf_nan"):
            if key in want:
                assert close(got[key], want[key], 1e-5), (path, key)
