"""msprobe never alters the storage of a tensor it reads: after a collected step every tensor the step
made or touched can still be resized, as FSDP2 does to free an unsharded parameter
(``untyped_storage().resize_(0)``). ``Tensor.numpy()`` pins a storage for good; statistics, checksums
and tensor files read the memory without it."""

from __future__ import annotations

import json

import pytest
import torch
from torch_models import TinyTransformer

from msprobe.pytorch import PrecisionDebugger

CONFIGS = [
    {"task": "statistics", "level": "L1"},
    {"task": "statistics", "level": "mix"},
    {"task": "statistics", "level": "L1", "statistics": {"summary_mode": "md5"}},
    {"task": "tensor", "level": "mix"},
    {"task": "overflow_check", "level": "L1"},
    {"task": "free_benchmark", "level": "L1"},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['task']}-{c['level']}-{len(c)}")
def test_every_tensor_of_a_collected_step_stays_resizable(tmp_path, config):
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({**config, "dump_path": str(tmp_path / "dump")}))
    torch.manual_seed(0)
    model = TinyTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    debugger = PrecisionDebugger(config_path=str(config_path))
    seen: list[torch.Tensor] = []  # every module's output

    def keep(module, args, output):
        seen.extend(t for t in (output if isinstance(output, tuple) else (output,)) if isinstance(t, torch.Tensor))

    for module in model.modules():
        module.register_forward_hook(keep)
    x, y = TinyTransformer.batch(torch.Generator().manual_seed(1))
    debugger.start(model)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    debugger.stop()
    seen.append(loss)
    tensors = [*seen, x, *model.parameters(), *(p.grad for p in model.parameters())]
    tensors += [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    assert len(tensors) > 50
    pinned = [tuple(t.shape) for t in tensors if not t.untyped_storage().resizable()]
    assert pinned == []
    parameter = next(model.parameters())
    parameter.data.untyped_storage().resize_(0)  # what FSDP2 does to a parameter after its forward


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                                   torch.uint8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64,
                                   torch.uint64, torch.complex64, torch.bool], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_every_dtype_is_read_in_place_with_exact_statistics(dtype, layout):
    from msprobe.pytorch.adapter import TorchTensorAdapter

    values = torch.arange(-6, 18).reshape(4, 6) % 7 if dtype != torch.bool else torch.arange(24).reshape(4, 6) % 3 > 0
    tensor = values.to(dtype) if dtype.is_signed or dtype == torch.bool else values.abs().to(dtype)
    if layout == "transposed":
        tensor = tensor.t()
    adapter = TorchTensorAdapter()
    stats = adapter.fetch([adapter.capture(tensor)[1]])[0]
    exact = tensor.to(torch.complex128).abs().double() if dtype.is_complex else tensor.double()
    if dtype == torch.bool:
        assert (stats.max, stats.min) == (bool(tensor.any()), bool(tensor.all()))
    else:
        assert (stats.max, stats.min) == (exact.max().item(), exact.min().item())
        assert stats.mean == pytest.approx(exact.mean().item(), rel=1e-6)
        assert stats.norm == pytest.approx(exact.norm().item(), rel=1e-6)
    assert tensor.untyped_storage().resizable()
