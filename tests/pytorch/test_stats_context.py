"""Statistics are exact whatever numerics context the user's code runs in (docs/pytorch/dump.md#statistics-precision).

Each context below changes what some torch operation computes: autocast runs matmul/dot in bf16 or fp16,
``set_float32_matmul_precision('medium')`` and TF32 allow reduced-precision matmul, and a user's
TorchFunctionMode or TorchDispatchMode can change any result. msprobe's statistics of a tensor must be
those of its values all the same, checked here against float64 numpy — and the user's modes must not
see msprobe's own work.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from dump_json import tensor_records
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from msprobe.pytorch import PrecisionDebugger
from msprobe.pytorch.adapter import TorchTensorAdapter, _device_stats, _Exact

# Above the adapter's numpy threshold (16,384), so torch's own reductions run.
LARGE = 40_000
MATMUL_FUNCS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.dot, torch.Tensor.dot,
                torch.mm, torch.mv, torch.inner, torch.linalg.vecdot, torch.einsum}


class ScaleMatmul(TorchFunctionMode):
    """A user's mode that doubles every matmul-like result (what msprobe's old sum of squares was)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func in MATMUL_FUNCS else out


class DistortFunctions(TorchFunctionMode):
    """A user's mode that changes every floating tensor any torch function returns by 0.1 %."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point() and not any(out is a for a in args):
            return out * 1.001
        return out


class DistortKernels(TorchDispatchMode):
    """A user's dispatch mode that changes the result of every non-view, non-mutating aten op by 0.1 %."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.is_mutable:
            return out
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out * 1.001
        return out


@contextlib.contextmanager
def reduced_precision_matmul() -> Iterator[None]:
    previous = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous[0])
        torch.backends.cuda.matmul.allow_tf32 = previous[1]


CONTEXTS = {
    "autocast-bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast-fp16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "matmul-medium-tf32": reduced_precision_matmul,
    "function-mode-scales-matmul": ScaleMatmul,
    "function-mode-distorts-all": DistortFunctions,
    "dispatch-mode-distorts-all": DistortKernels,
}
DTYPES = {torch.float32: 1e-6, torch.bfloat16: 1e-6, torch.float16: 1e-6, torch.float64: 1e-12}


def _values(n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=generator, dtype=torch.float64) * 3 + 0.5).to(dtype)


def assert_exact(stats, tensor: torch.Tensor, rel: float) -> None:
    """Max/Min/Norm within ``rel`` of float64 numpy; Mean within ``rel`` of max(|mean|, RMS), since a
    mean near zero is the difference of large sums and cannot be relatively exact."""
    values = tensor.detach().cpu().to(torch.float64).numpy().ravel()
    rms = math.sqrt(float(np.mean(values * values)))
    assert stats.max == pytest.approx(values.max(), rel=rel, abs=0)
    assert stats.min == pytest.approx(values.min(), rel=rel, abs=0)
    assert stats.norm == pytest.approx(math.sqrt(float(values @ values)), rel=rel, abs=0)
    mean = float(values.mean())
    assert abs(stats.mean - mean) <= rel * max(abs(mean), rms)


def _host(tensor: torch.Tensor):
    adapter = TorchTensorAdapter()
    return adapter.fetch([adapter.stats(tensor)])[0]


def _device(tensor: torch.Tensor):
    """The accelerator path (launch on the device, fetch later) as the adapter runs it, here on CPU."""
    adapter = TorchTensorAdapter()
    with _Exact(tensor):
        handle = _device_stats(tensor.detach())
    return adapter.fetch([handle])[0]


@pytest.mark.parametrize("path", [_host, _device], ids=["host", "device"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_statistics_are_exact_under_the_users_context(context, dtype, path):
    tensor = _values(LARGE, dtype)
    with CONTEXTS[context]():
        stats = path(tensor)
    assert_exact(stats, tensor, DTYPES[dtype])


@pytest.mark.parametrize("path", [_host, _device], ids=["host", "device"])
def test_float32_norm_of_millions_of_elements_is_exact(path):
    """A single float32 reduction drifts with the element count (1e-5 relative at 1M elements with
    ``vector_norm``, 2e-6 with a BLAS dot); all-positive values make the drift largest."""
    tensor = _values(3_000_000, torch.float32).abs()
    assert_exact(path(tensor), tensor, 1e-6)


@pytest.mark.parametrize("path", [_host, _device], ids=["host", "device"])
@pytest.mark.parametrize("shape", [(40, 1000), (16, 64, 128), (50_000, 3), (3, 20_000), (7, 1, 4099), (1, 65_536)])
def test_norm_is_exact_for_every_row_layout(shape, path):
    """The norm's float32 partial sums run over the trailing dimensions when they hold 256 to 16,384
    elements, else over rows of 1,024 and a tail: each layout (and a transposed, non-contiguous view)."""
    tensor = _values(math.prod(shape), torch.float32).abs().reshape(shape)
    assert_exact(path(tensor), tensor, 1e-6)
    assert_exact(path(tensor.mT), tensor.mT, 1e-6)


@pytest.mark.parametrize("mode_type", [DistortFunctions, DistortKernels])
def test_the_users_mode_sees_nothing_and_stays_on(mode_type):
    tensor = _values(LARGE, torch.float32)
    small = _values(100, torch.bfloat16)
    with mode_type() as mode:
        adapter = TorchTensorAdapter()
        adapter.fetch([adapter.stats(tensor), adapter.stats(small)])
        adapter.checksum(tensor)
        adapter.describe(tensor)
        assert mode.seen == []
        torch.ones(2).sum()  # and the mode is still active for the user's own code
        assert mode.seen != []


def test_autocast_stays_on_for_the_user_after_statistics():
    tensor = _values(LARGE, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _host(tensor)
        _device(tensor)
        assert torch.is_autocast_enabled("cpu")
        assert (tensor[:4].view(2, 2) @ tensor[4:8].view(2, 2)).dtype == torch.bfloat16


@pytest.mark.parametrize("task_context", ["autocast-bf16", "function-mode-scales-matmul"])
def test_llama_under_the_users_context_dumps_exact_statistics(tmp_path, monkeypatch, task_context):
    """A real model (tiny LLaMA, hidden 64, logits of 65,536 elements) run in the user's context with
    task tensor at L1: every floating tensor's Max/Min/Mean/Norm in dump.json agrees with float64 numpy
    of the saved .pt file."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, config.vocab_size, (2, 32))
    debugger = PrecisionDebugger(task="tensor", level="L1", dump_path=str(tmp_path), step=[0])
    with CONTEXTS[task_context]():  # entered first: msprobe's own mode sits above the user's
        debugger.start(model)
        model(input_ids=ids, labels=ids).loss.backward()
        debugger.stop()
    debugger.finish()

    dump = json.loads((tmp_path / "step0" / "rank" / "dump.json").read_text())
    tensor_dir = Path(dump["dump_data_dir"])
    checked: dict[str, int] = {}
    for entry in dump["data"].values():
        for record in tensor_records(entry):
            if record["dtype"] not in ("torch.float32", "torch.bfloat16", "torch.float16") or record["Max"] is None:
                continue
            saved = torch.load(tensor_dir / record["data_name"], weights_only=True)
            assert str(saved.dtype) == record["dtype"]
            stats = type("Stats", (), {key.lower(): record[key] for key in ("Max", "Min", "Mean", "Norm")})
            assert_exact(stats, saved, 1e-6)
            checked[record["dtype"]] = max(checked.get(record["dtype"], 0), saved.numel())
    assert checked["torch.float32"] > LARGE  # the logits and their gradient
    if task_context == "autocast-bf16":
        assert checked["torch.bfloat16"] > LARGE
    assert os.path.isdir(tensor_dir)
